#!/usr/bin/env python3
"""Build tools/demo-model/corpus/ from the Debian package r-cran-janeaustenr.

The package ships the six completed novels of Jane Austen (public-domain texts, originally from Project
Gutenberg; the R package itself is MIT-licensed) as R data objects, one character vector per novel, one element
per printed line. This script dumps them with Rscript, unwraps the hard line breaks into one line per paragraph,
drops the underscores that mark italics, collapses runs of spaces, and writes one xz-compressed UTF-8 file per
novel (paragraphs separated by a blank line).

    apt-get install r-cran-janeaustenr     # pulls in r-base-core
    python3 tools/demo-model/prepare_corpus.py
"""
import lzma
import os
import re
import subprocess
import tempfile

NOVELS = ["sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey", "persuasion"]
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def dump_novels(workdir):
    script = (
        "library(janeaustenr); "
        "for (n in c(%s)) writeLines(get(n), file.path('%s', paste0(n, '.txt')), useBytes=TRUE)"
        % (", ".join("'%s'" % n for n in NOVELS), workdir)
    )
    subprocess.run(["Rscript", "-e", script], check=True)


def clean(text):
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        line = " ".join(l.strip() for l in block.strip().splitlines())
        line = line.replace("_", "")
        line = re.sub(r"\s+", " ", line).strip()
        if line:
            paragraphs.append(line)
    return "\n\n".join(paragraphs) + "\n"


def main():
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        dump_novels(tmp)
        for n in NOVELS:
            with open(os.path.join(tmp, n + ".txt"), encoding="utf-8") as f:
                text = clean(f.read())
            path = os.path.join(OUT, n + ".txt.xz")
            # fixed preset, no timestamps in the xz container: the output is byte-for-byte reproducible
            with open(path, "wb") as f:
                f.write(lzma.compress(text.encode("utf-8"), preset=9))
            print(f"{path}: {len(text)} characters, {text.count(chr(10) + chr(10)) + 1} paragraphs")


if __name__ == "__main__":
    main()
