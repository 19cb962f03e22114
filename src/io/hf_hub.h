// Hugging Face Hub model ids (`pagellm serve Qwen/Qwen3-8B`), resolved as huggingface_hub does so
// that Python tools and pagellm share one cache: CACHE/models--ORG--NAME/{blobs/ETAG,
// snapshots/COMMIT/FILE -> ../../blobs/ETAG, refs/REVISION = COMMIT}. A model already in the cache
// is used as it is (and only the cache with HF_HUB_OFFLINE=1); otherwise its config, tokenizer,
// generation config and safetensors files are downloaded (in parallel, resumable: a transfer cut
// off continues from blobs/ETAG.incomplete; sizes and the Hub's checksums verified before the blob
// takes its final name) through the Hub's documented HTTP API:
//   GET  ENDPOINT/api/models/ID/revision/REVISION   -> {"sha": COMMIT, "siblings": [{"rfilename"}]}
//   HEAD ENDPOINT/ID/resolve/COMMIT/FILE            -> ETag / X-Linked-Etag, sizes, redirect
//   GET  the same (following redirects; the token goes only to the endpoint's host).
// Environment as huggingface_hub: HF_ENDPOINT, HF_TOKEN (else HUGGING_FACE_HUB_TOKEN, else
// HF_HOME/token), HF_HUB_CACHE / HF_HOME / XDG_CACHE_HOME, HF_HUB_OFFLINE.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace pagellm::io::hub {

struct HubOptions {
  std::string endpoint = "https://huggingface.co";
  std::string token;
  std::filesystem::path cache_dir;
  std::string revision = "main";
  bool offline = false;
  int parallel_downloads = 8;
};

// Options from the environment; download_dir (vLLM's --download-dir), when given, is the cache.
HubOptions options_from_env(const std::string& revision, const std::string& download_dir);

// Whether `model` names a Hub repo rather than a local folder: "ORG/NAME" that is not an existing
// path. check_* throw a one-line pagellm::Error for ids, revisions and repo file names that are
// malformed or could escape the cache ("..", absolute paths, odd characters).
bool is_repo_id(const std::string& model);
void check_repo_id(const std::string& id);
void check_revision(const std::string& revision);
void check_repo_file(const std::string& name);

// CACHE/models--ORG--NAME.
std::filesystem::path repo_dir(const HubOptions& options, const std::string& id);

// The snapshot folder of id at options.revision if the cache holds a complete one (config.json and
// every safetensors file its index lists).
std::optional<std::filesystem::path> cached_snapshot(const HubOptions& options,
                                                     const std::string& id);

// The local folder of `id`: the cached snapshot, else downloaded into the cache (not with
// options.offline). Throws pagellm::Error naming the id and the problem (401/403: gated or private,
// 404: no such repo / revision, no safetensors, disk full, checksum mismatch, network).
std::filesystem::path resolve_model(const std::string& id, const HubOptions& options);

// The Hub's answer to GET /api/models/ID/revision/REVISION: the commit and the wanted files (every
// name checked with check_repo_file). Throws for a body that is no listing, one of more than
// 100000 files, or one without config.json or safetensors weights.
struct ModelListing {
  std::string commit;
  std::vector<std::string> files;
};
ModelListing parse_model_listing(const std::string& body, const std::string& id,
                                 const std::string& revision);

// Whether a repo file is one pagellm needs (config, tokenizer, generation config, chat template,
// safetensors weights and their index).
bool wanted_file(const std::string& name);

}  // namespace pagellm::io::hub
