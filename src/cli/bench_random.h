#pragma once
// Random-weight checkpoints for `vatic bench`: speed at a released model's widths without its weights. Any config
// vatic reads can be turned into a checkpoint: the tensors are the ones its family expects
// (ModelFamily::expected_tensors), norms and scalars at 1, biases at 0, matrices uniform with standard deviation
// 0.02, written once into a cache folder named by the config ($VATIC_CACHE/bench, else ~/.cache/vatic/bench).
// Decoding random weights is as fast as decoding real ones; only acceptance of drafts differs (it is forced).
#include <filesystem>
#include <string>

#include "formats/model_source.h"
#include "formats/safetensors.h"
#include "quant/quantize.h"
#include "util/json.h"

namespace vatic::cli {

// SplitMix64: the bench's deterministic random numbers.
uint64_t splitmix(uint64_t x);

// Uniform values with standard deviation `std`, as BF16 (deterministic in `seed`).
Tensor random_bf16(const Shape& shape, float std, uint64_t seed);

// The config with its first `layers` layers (0: all): the layer pattern cut to length, KV-shared layers scaled
// to the same share and kept after at least one layer of each attention type that owns its cache.
json cut_to_layers(json config, int layers);

// The Gemma 4 assistant drafter that fits a Gemma 4 target config, at the released assistants' sizes: with
// per-layer embeddings (E2B, E4B) hidden 256, MLP 2048, 4 query heads and a centroid head (2048 clusters, top 32);
// without (26B-A4B, 31B) hidden 1024, MLP 8192, the target's query heads and a dense head. Its 4 layers read the
// target's cache (KV heads, head dims, windows and RoPE are the target's).
json gemma4_assistant_config_for(const json& target);

// The checkpoint directory for `config` (written on first use; `label` names the folder and messages).
std::filesystem::path ensure_random_checkpoint(const json& config, const std::string& label);

// A quantized copy of a checkpoint directory next to it, following the quantization policy of its family. A tied
// embedding table (embedding and LM head at once) stays as it is.
std::filesystem::path quantized_copy(const std::filesystem::path& src, QuantType type, int group, bool draft);

// The same model (quantized by `type` unless None, as quantized_copy would) made in memory, each tensor placed on
// `device` as it is made: no weights on disk, only the config.json the loader reads (in the cache folder). For
// shapes whose weights would not fit the disk, and for the device's bench, which then never waits on a file.
ModelSource random_model_in_memory(const json& config, const std::string& label, Device device, QuantType type,
                                   int group, bool draft);

// Bytes of weights one plain decode step reads from `store` (a model of `config`): every tensor, except that an
// embedding table only read by row (per-layer embeddings; token embeddings when an untied LM head exists) counts
// one row, routed experts count the share each token uses (experts per token / experts), and layers past the
// model's own (GLM's MTP layer) count nothing.
double decode_weight_bytes(const TensorStore& store, const json& config);

// Floating-point operations of a prompt's matmuls by weights over `tokens` tokens (2 per multiply-add): every
// matrix of the model's layers and outside them once per token (routed experts by their share), the LM head once
// (a prompt's logits are its last row's), embedding tables none. Attention's own products are not counted. 0 when
// a matrix is quantized (its count would depend on the encoding).
double prompt_matmul_flops(const TensorStore& store, const json& config, int64_t tokens);

// Bytes of weights one Gemma 4 assistant step reads: its layers and projections, the centroid table, the chosen
// top-k clusters' rows of its embedding (all of it for a dense head).
double drafter_step_bytes(const TensorStore& store, const json& config);

// Bytes of weights one step of a drafter the target carries (GLM's MTP layers: the layers past the model's own)
// reads: those layers (routed experts by their share), the LM head, one row of the token embedding.
double builtin_drafter_step_bytes(const TensorStore& store, const json& config);

}  // namespace vatic::cli
