#include "io/hf_hub.h"

#include <openssl/evp.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/logging.h"
#include "io/http_client.h"

namespace pagellm::io::hub {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kMaxSiblings = 100000;  // a listing longer than this is refused
constexpr int kMaxRedirects = 10;
constexpr int kMaxAttempts = 5;          // per file: the first transfer and its resumptions

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool truthy(std::string v) {
  for (char& c : v) c = char(std::tolower(static_cast<unsigned char>(c)));
  return v == "1" || v == "on" || v == "yes" || v == "true";
}

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

// A path component: 1..96 name characters, not "." or "..".
bool good_component(const std::string& s, size_t max_len = 96) {
  if (s.empty() || s.size() > max_len || s == "." || s == "..") return false;
  for (char c : s)
    if (!name_char(c)) return false;
  return true;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) out.push_back(s.substr(begin, i - begin)), begin = i + 1;
  return out;
}

bool hex_of_length(const std::string& s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

// The model's files a snapshot must hold: config.json, and every shard the index names (or
// model.safetensors).
bool snapshot_complete(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir / "config.json", ec)) return false;
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    const json j = json::parse(std::ifstream(index), nullptr, false);
    if (j.is_discarded() || !j.contains("weight_map") || !j["weight_map"].is_object()) return false;
    for (const auto& [tensor, file] : j["weight_map"].items())
      if (!file.is_string() || !fs::exists(dir / file.get<std::string>(), ec)) return false;
    return true;
  }
  return fs::exists(dir / "model.safetensors", ec);
}

[[noreturn]] void http_failure(const std::string& id, const std::string& what, const HttpResponse& r,
                               const HubOptions& o) {
  if (r.status == 0)
    throw_error(ErrorKind::kNotFound, "Hugging Face Hub: cannot reach " + o.endpoint + " for " + id +
                                             ": " + r.error +
                                             " (HF_HUB_OFFLINE=1 uses only the local cache)");
  if (r.status == 401 || r.status == 403)
    throw_error(ErrorKind::kInvalidArgument,
                "Hugging Face Hub: access to " + id + " denied (HTTP " + std::to_string(r.status) +
                    "): the model is gated or private; set HF_TOKEN to a token that has access");
  if (r.status == 404)
    throw_error(ErrorKind::kNotFound, "Hugging Face Hub: " + what + " not found on " + o.endpoint +
                                          " (HTTP 404)");
  throw_error(ErrorKind::kNotFound, "Hugging Face Hub: " + what + ": HTTP " +
                                           std::to_string(r.status) + " from " + o.endpoint);
}

std::vector<std::string> auth_headers(const HubOptions& o) {
  if (o.token.empty()) return {};
  return {"Authorization: Bearer " + o.token};
}

// One file of the snapshot: its resolve URL and what the Hub says about it.
struct RepoFile {
  std::string name, url;
  std::string etag;   // blob name: sha256 (LFS) or git sha1
  uint64_t size = 0;
};

// HEAD without following redirects: the metadata is on the first response.
void read_metadata(const std::string& id, const HubOptions& o, RepoFile& f) {
  HttpRequest req;
  req.url = f.url;
  req.head = true;
  req.headers = auth_headers(o);
  const HttpResponse r = http_request(req);
  if (r.status < 200 || r.status >= 400) http_failure(id, id + "/" + f.name, r, o);
  auto header = [&](const char* name) {
    const auto it = r.headers.find(name);
    return it == r.headers.end() ? std::string() : it->second;
  };
  std::string etag = header("x-linked-etag");
  if (etag.empty()) etag = header("etag");
  if (etag.rfind("W/", 0) == 0) etag = etag.substr(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  std::string size = header("x-linked-size");
  if (size.empty()) size = header("content-length");
  if (!good_component(etag, 128) || size.empty() ||
      size.find_first_not_of("0123456789") != std::string::npos || size.size() > 15)
    throw_error(ErrorKind::kNotFound, "Hugging Face Hub: " + id + "/" + f.name +
                                             ": the Hub sent no usable ETag / size");
  f.etag = etag;
  f.size = std::stoull(size);
}

// Hex digest of a file with `prefix` hashed first (git blob ids hash "blob SIZE\0" + content).
std::string file_digest(const fs::path& p, const EVP_MD* md, const std::string& prefix) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, md, nullptr);
  EVP_DigestUpdate(ctx, prefix.data(), prefix.size());
  std::ifstream in(p, std::ios::binary);
  std::vector<char> buf(1 << 20);
  while (in.read(buf.data(), std::streamsize(buf.size())) || in.gcount() > 0)
    EVP_DigestUpdate(ctx, buf.data(), size_t(in.gcount()));
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx, out, &n);
  EVP_MD_CTX_free(ctx);
  std::string hex;
  char h[3];
  for (unsigned int i = 0; i < n; ++i) std::snprintf(h, sizeof h, "%02x", out[i]), hex += h;
  return hex;
}

// The checksum the Hub's ETag carries: sha256 of LFS files, the git blob sha1 of the others.
bool checksum_matches(const fs::path& p, const RepoFile& f) {
  if (hex_of_length(f.etag, 64)) return file_digest(p, EVP_sha256(), "") == f.etag;
  if (hex_of_length(f.etag, 40))
    return file_digest(p, EVP_sha1(), "blob " + std::to_string(f.size) + '\0') == f.etag;
  return true;  // an ETag that is no known digest: the size check stands alone
}

// Where a redirect goes: absolute URLs as they are, "/path" on the same scheme and host.
std::string redirect_target(const std::string& from, const std::string& location) {
  if (location.find("://") != std::string::npos) return location;
  const size_t scheme = from.find("://");
  const size_t path = from.find('/', scheme + 3);
  const std::string origin = path == std::string::npos ? from : from.substr(0, path);
  return location.rfind('/', 0) == 0 ? origin + location : origin + "/" + location;
}

// Appends the rest of f to `partial` (resuming at its size), following redirects; the token goes
// only to the endpoint's host. Returns the transport error or "" when the body ended.
std::string transfer(const std::string& id, const HubOptions& o, const RepoFile& f,
                     const fs::path& partial, const std::atomic<bool>& stop,
                     std::atomic<uint64_t>& done_bytes) {
  std::error_code ec;
  const uint64_t have = fs::exists(partial, ec) ? fs::file_size(partial, ec) : 0;
  if (have == f.size) return "";
  if (have > f.size) fs::remove(partial, ec);
  std::string url = f.url;
  const std::string home = url_authority(o.endpoint);
  for (int hop = 0; hop <= kMaxRedirects; ++hop) {
    const uint64_t from = fs::exists(partial, ec) ? fs::file_size(partial, ec) : 0;
    std::FILE* out = std::fopen(partial.c_str(), "ab");
    if (!out) throw_error(ErrorKind::kNotFound, "cannot write " + partial.string());
    HttpRequest req;
    req.url = url;
    if (url_authority(url) == home) req.headers = auth_headers(o);
    req.range_from = from > 0 ? int64_t(from) : -1;
    bool write_failed = false;
    req.sink = [&](const char* data, size_t n) {
      if (stop) return false;
      if (std::fwrite(data, 1, n, out) != n) {
        write_failed = true;
        return false;
      }
      done_bytes += n;
      return true;
    };
    HttpResponse r = http_request(req);
    std::fclose(out);
    if (write_failed)
      throw_error(ErrorKind::kResourceExhausted,
                  "writing " + partial.string() + " failed (disk full?) while downloading " + id +
                      "/" + f.name);
    if (r.status >= 300 && r.status < 400 && r.headers.count("location")) {
      url = redirect_target(url, r.headers["location"]);
      continue;
    }
    if (r.status == 200 && from > 0 && r.bytes > 0) {
      // The server ignored the range and sent the whole file after the partial bytes: move that
      // copy to the front, in pieces, and cut the file there.
      std::fstream io(partial, std::ios::in | std::ios::out | std::ios::binary);
      std::vector<char> buf(1 << 20);
      for (uint64_t done = 0; done < r.bytes && io;) {
        const size_t n = size_t(std::min<uint64_t>(buf.size(), r.bytes - done));
        io.seekg(std::streamoff(from + done));
        io.read(buf.data(), std::streamsize(n));
        io.seekp(std::streamoff(done));
        io.write(buf.data(), std::streamsize(n));
        done += n;
      }
      io.close();
      fs::resize_file(partial, r.bytes, ec);
    }
    if (r.status == 416) return "";  // nothing left to send
    if (r.status != 200 && r.status != 206) {
      if (r.status == 0) return r.error.empty() ? "no response" : r.error;
      http_failure(id, id + "/" + f.name, r, o);
    }
    return r.error;
  }
  throw_error(ErrorKind::kNotFound,
              "Hugging Face Hub: " + id + "/" + f.name + ": more than 10 redirects");
}

// Downloads f into blobs/ETAG (through ETAG.incomplete, resumed up to kMaxAttempts times) and links
// it into the snapshot.
void fetch_file(const std::string& id, const HubOptions& o, const RepoFile& f, const fs::path& repo,
                const fs::path& snapshot, const std::atomic<bool>& stop,
                std::atomic<uint64_t>& done_bytes) {
  std::error_code ec;
  const fs::path blob = repo / "blobs" / f.etag;
  if (!(fs::exists(blob, ec) && fs::file_size(blob, ec) == f.size)) {
    const fs::path partial = repo / "blobs" / (f.etag + ".incomplete");
    std::string error = "interrupted";
    for (int attempt = 0; attempt < kMaxAttempts && !stop; ++attempt) {
      error = transfer(id, o, f, partial, stop, done_bytes);
      if (error.empty() && fs::exists(partial, ec) && fs::file_size(partial, ec) >= f.size) break;
      if (error.empty()) error = "the transfer ended early";
    }
    if (stop) return;
    const uint64_t got = fs::exists(partial, ec) ? fs::file_size(partial, ec) : 0;
    if (got != f.size)
      throw_error(ErrorKind::kNotFound,
                  "Hugging Face Hub: " + id + "/" + f.name + ": download incomplete after " +
                      std::to_string(kMaxAttempts) + " attempts (" + std::to_string(got) + " of " +
                      std::to_string(f.size) + " bytes; " + error +
                      "); run again to resume");
    if (!checksum_matches(partial, f)) {
      fs::remove(partial, ec);
      throw_error(ErrorKind::kNotFound, "Hugging Face Hub: " + id + "/" + f.name +
                                               ": checksum does not match the Hub's ETag " +
                                               f.etag + "; the partial file was removed");
    }
    fs::rename(partial, blob);
  }
  const fs::path link = snapshot / f.name;
  fs::create_directories(link.parent_path());
  fs::remove(link, ec);
  fs::create_symlink(fs::relative(blob, link.parent_path()), link);
}

// Refuses a download that cannot fit on the cache's file system.
void check_disk_space(const fs::path& repo, uint64_t needed, const std::string& id) {
  struct statvfs st {};
  if (::statvfs(repo.c_str(), &st) != 0) return;
  const uint64_t free_bytes = uint64_t(st.f_bavail) * st.f_frsize;
  if (needed > free_bytes)
    throw_error(ErrorKind::kResourceExhausted,
                "Hugging Face Hub: " + id + " needs " + std::to_string(needed >> 20) +
                    " MiB but " + repo.string() + " has " + std::to_string(free_bytes >> 20) +
                    " MiB free (--download-dir puts the cache elsewhere)");
}

}  // namespace

HubOptions options_from_env(const std::string& revision, const std::string& download_dir) {
  HubOptions o;
  if (!env("HF_ENDPOINT").empty()) o.endpoint = env("HF_ENDPOINT");
  while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
  const std::string home_dir = env("HOME").empty() ? "/tmp" : env("HOME");
  const fs::path hf_home = !env("HF_HOME").empty()           ? fs::path(env("HF_HOME"))
                           : !env("XDG_CACHE_HOME").empty() ? fs::path(env("XDG_CACHE_HOME")) / "huggingface"
                                                             : fs::path(home_dir) / ".cache" / "huggingface";
  o.cache_dir = !download_dir.empty()         ? fs::path(download_dir)
                : !env("HF_HUB_CACHE").empty() ? fs::path(env("HF_HUB_CACHE"))
                                               : hf_home / "hub";
  o.token = env("HF_TOKEN");
  if (o.token.empty()) o.token = env("HUGGING_FACE_HUB_TOKEN");
  if (o.token.empty()) o.token = read_text(hf_home / "token");
  o.offline = truthy(env("HF_HUB_OFFLINE"));
  if (!revision.empty()) o.revision = revision;
  return o;
}

bool is_repo_id(const std::string& model) {
  std::error_code ec;
  if (model.empty() || fs::exists(model, ec) || model.front() == '/' || model.front() == '.')
    return false;
  return std::count(model.begin(), model.end(), '/') == 1;
}

void check_repo_id(const std::string& id) {
  const std::vector<std::string> parts = split(id, '/');
  if (parts.size() != 2 || !good_component(parts[0]) || !good_component(parts[1]) ||
      parts[0].find("--") != std::string::npos || parts[1].find("--") != std::string::npos)
    invalid_argument("'" + id + "' is neither a model folder nor a Hugging Face Hub id "
                     "(ORG/NAME: letters, digits, '-', '_', '.')");
}

void check_revision(const std::string& revision) {
  bool ok = !revision.empty() && revision.size() <= 128 && revision.front() != '/';
  for (const std::string& part : split(revision, '/')) ok = ok && good_component(part, 128);
  if (!ok)
    invalid_argument("--revision '" + revision +
                     "' is not a branch, tag or commit name (no '..', no leading '/')");
}

void check_repo_file(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 255 && name.front() != '/';
  const std::vector<std::string> parts = split(name, '/');
  ok = ok && parts.size() <= 4;
  for (const std::string& part : parts) ok = ok && good_component(part, 255);
  if (!ok)
    throw_error(ErrorKind::kInvalidArgument,
                "Hugging Face Hub: refusing the repo file name '" + name + "' (it could leave the cache)");
}

fs::path repo_dir(const HubOptions& o, const std::string& id) {
  const std::vector<std::string> parts = split(id, '/');
  return o.cache_dir / ("models--" + parts.at(0) + "--" + parts.at(1));
}

std::optional<fs::path> cached_snapshot(const HubOptions& o, const std::string& id) {
  const fs::path repo = repo_dir(o, id);
  std::string commit = o.revision;
  if (!hex_of_length(commit, 40)) {
    commit = read_text(repo / "refs" / o.revision);
    if (!hex_of_length(commit, 40)) return std::nullopt;
  }
  const fs::path snapshot = repo / "snapshots" / commit;
  if (!snapshot_complete(snapshot)) return std::nullopt;
  return snapshot;
}

bool wanted_file(const std::string& name) {
  static const char* const kFiles[] = {"config.json", "generation_config.json", "tokenizer.json",
                                       "tokenizer_config.json", "special_tokens_map.json",
                                       "tokenizer.model", "chat_template.jinja", "chat_template.json",
                                       "model.safetensors.index.json"};
  for (const char* f : kFiles)
    if (name == f) return true;
  return name.find('/') == std::string::npos && name.size() > 12 &&
         name.compare(name.size() - 12, 12, ".safetensors") == 0;
}

ModelListing parse_model_listing(const std::string& body, const std::string& id,
                                 const std::string& revision) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("sha") || !j["sha"].is_string() ||
      !hex_of_length(j["sha"].get<std::string>(), 40) || !j.contains("siblings") ||
      !j["siblings"].is_array())
    throw_error(ErrorKind::kNotFound, "Hugging Face Hub: the listing of " + id +
                                          " is not a model listing (sha, siblings)");
  if (j["siblings"].size() > kMaxSiblings)
    throw_error(ErrorKind::kNotFound, "Hugging Face Hub: " + id + " lists " +
                                          std::to_string(j["siblings"].size()) +
                                          " files; refusing more than 100000");
  ModelListing out;
  out.commit = j["sha"].get<std::string>();
  bool config = false, weights = false;
  for (const json& s : j["siblings"]) {
    if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) continue;
    const std::string name = s["rfilename"].get<std::string>();
    if (!wanted_file(name)) continue;
    check_repo_file(name);
    config = config || name == "config.json";
    weights = weights || name.ends_with(".safetensors");
    out.files.push_back(name);
  }
  if (!config || !weights)
    throw_error(ErrorKind::kUnsupported,
                "Hugging Face Hub: " + id + " (revision " + revision + ") has no " +
                    (config ? "safetensors weights (pagellm reads safetensors only)" : "config.json"));
  return out;
}

namespace {

// The revision's commit and the wanted files from the Hub's model info.
ModelListing list_files(const std::string& id, const HubOptions& o) {
  std::string body;
  HttpRequest req;
  req.url = o.endpoint + "/api/models/" + id + "/revision/" + o.revision;
  req.headers = auth_headers(o);
  req.sink = [&](const char* data, size_t n) {
    body.append(data, n);
    return body.size() <= (64u << 20);  // a model listing is far smaller
  };
  const HttpResponse r = http_request(req);
  if (r.status != 200) http_failure(id, id + " (revision " + o.revision + ")", r, o);
  return parse_model_listing(body, id, o.revision);
}

// Runs fetch_file over the files on o.parallel_downloads threads; a progress line on a terminal,
// one log line per finished file otherwise. The first error stops the others and is rethrown.
void fetch_all(const std::string& id, const HubOptions& o, std::vector<RepoFile>& files,
               const fs::path& repo, const fs::path& snapshot) {
  uint64_t total = 0;
  for (const RepoFile& f : files) total += f.size;
  std::atomic<size_t> next{0}, finished{0};
  std::atomic<uint64_t> done_bytes{0};
  std::atomic<bool> stop{false};
  std::mutex m;
  std::exception_ptr failure;
  const bool tty = ::isatty(2) != 0;
  auto worker = [&] {
    for (size_t i; !stop && (i = next++) < files.size();) {
      try {
        fetch_file(id, o, files[i], repo, snapshot, stop, done_bytes);
        ++finished;
        if (!tty) log::info("downloaded " + id + "/" + files[i].name);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!failure) failure = std::current_exception();
        stop = true;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(1, o.parallel_downloads); ++t) threads.emplace_back(worker);
  const auto start = std::chrono::steady_clock::now();
  while (tty && finished < files.size() && !stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "\rdownloading %s: %zu/%zu files, %.2f / %.2f GB, %.0f MB/s   ", id.c_str(),
                 finished.load(), files.size(), double(done_bytes) / 1e9, double(total) / 1e9,
                 double(done_bytes) / 1e6 / std::max(s, 1e-3));
  }
  for (std::thread& t : threads) t.join();
  if (tty) std::fprintf(stderr, "\n");
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

fs::path resolve_model(const std::string& id, const HubOptions& o) {
  check_repo_id(id);
  check_revision(o.revision);
  if (const std::optional<fs::path> cached = cached_snapshot(o, id)) return *cached;
  if (o.offline)
    throw_error(ErrorKind::kNotFound, "Hugging Face Hub: " + id + " (revision " + o.revision +
                                          ") is not in the cache " + o.cache_dir.string() +
                                          " and HF_HUB_OFFLINE is set");
  const ModelListing listing = list_files(id, o);
  const std::string& commit = listing.commit;
  const std::vector<std::string>& names = listing.files;
  const fs::path repo = repo_dir(o, id);
  const fs::path snapshot = repo / "snapshots" / commit;
  fs::create_directories(repo / "blobs");
  fs::create_directories(snapshot);
  std::vector<RepoFile> files;
  uint64_t needed = 0;
  std::error_code ec;
  for (const std::string& name : names) {
    RepoFile f;
    f.name = name;
    f.url = o.endpoint + "/" + id + "/resolve/" + commit + "/" + name;
    read_metadata(id, o, f);
    const fs::path blob = repo / "blobs" / f.etag;
    if (!(fs::exists(blob, ec) && fs::file_size(blob, ec) == f.size)) needed += f.size;
    files.push_back(f);
  }
  check_disk_space(repo, needed, id);
  log::info("Hugging Face Hub: " + id + " revision " + o.revision + " (" + commit + "): " +
            std::to_string(files.size()) + " files, " + std::to_string(needed >> 20) +
            " MiB to download into " + repo.string());
  fetch_all(id, o, files, repo, snapshot);
  if (o.revision != commit) {
    fs::create_directories((repo / "refs" / o.revision).parent_path());
    const fs::path ref = repo / "refs" / o.revision;
    std::ofstream(ref.string() + ".tmp") << commit;
    fs::rename(ref.string() + ".tmp", ref);
  }
  if (!snapshot_complete(snapshot))
    throw_error(ErrorKind::kNotFound, "Hugging Face Hub: " + id + ": the snapshot " +
                                             snapshot.string() +
                                             " lacks a shard its index lists");
  return snapshot;
}

}  // namespace pagellm::io::hub
