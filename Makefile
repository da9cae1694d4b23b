# Entry points a newcomer uses; see README.md.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: setup configure build demo test bench format clean

setup:
	@bash scripts/setup.sh

configure: setup
	@test -f $(BUILD)/build.ninja || cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVATIC_WERROR=ON >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# Builds vatic, imports the bundled default model into the store if needed, and runs a prompt.
demo: build
	@bash scripts/demo.sh

test: build
	@bash scripts/test.sh

bench: build
	@$(BUILD)/vatic bench

format:
	@find src tests bench -name '*.cpp' -o -name '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
