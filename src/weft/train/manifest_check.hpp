#pragma once
// A checkpoint's manifest checked against the model its config describes, before any shard is
// read: the ckpt layer checks what the manifest says of itself (types, names), but only the model
// knows which tensors a config implies and how a tensor-parallel shard's elements map to the
// logical tensor. A hand-edited or miswritten manifest (another n_layer, a range listed twice)
// would otherwise load a model other than the one saved.
#include <string>

#include "weft/ckpt/manifest.hpp"
#include "weft/model/config.hpp"

namespace weft::train {

// The manifest's model config (valid, as the trainer checks a preset), after checking that its
// tensors are the ones that config implies, of the same shapes and tensor-parallel splits, and
// that the ranges of its shards hold every element of every tensor, in each of the three states,
// exactly once. Throws weft::Error naming `where` (the manifest file) and the first problem.
model::ModelConfig check_manifest_model(const ckpt::Manifest& m, const std::string& where);

}  // namespace weft::train
