#!/usr/bin/env python3
"""A fake Hugging Face Hub on localhost for tests/e2e/hf_hub_test.sh, following the Hub's documented
HTTP API (stdlib only):

  GET  /api/models/ORG/NAME/revision/REV  -> {"id", "sha", "siblings": [{"rfilename"}]}
  HEAD|GET /ORG/NAME/resolve/REV/FILE     -> small files: 200 with ETag = git blob sha1;
                                             *.safetensors ("LFS"): 302 to the CDN with
                                             X-Linked-Etag = sha256, X-Linked-Size
  GET  /cdn/SHA256                        -> the blob, honouring "Range: bytes=N-" (206)

The CDN is reached under another host name (localhost instead of 127.0.0.1), as the real Hub
redirects to another host: a request that brings an Authorization header there is logged, and the
test fails on it. The first full GET of each blob is cut off halfway (the client must resume).
Repos: ORG/NAME -> a model folder, given as NAME=DIR arguments; "gated" ones need
"Authorization: Bearer secret"; the repo "test-org/badsum" reports a wrong sha256 for its weights;
the CDN ignores Range headers for "test-org/norange"'s blobs (a 200 with the whole file).

Usage: fake_hub.py PORT LOG_FILE REPO=DIR [gated:REPO=DIR ...]   (prints "ready" when listening)
"""
import hashlib
import http.server
import json
import os
import sys
import threading

TOKEN = "secret"


class Repo:
    def __init__(self, folder, gated):
        self.folder, self.gated = folder, gated
        self.files = sorted(f for f in os.listdir(folder) if os.path.isfile(os.path.join(folder, f)))
        self.sha = hashlib.sha1(folder.encode()).hexdigest()


REPOS, BLOBS, LOG, CUT, NORANGE = {}, {}, None, set(), set()
LOCK = threading.Lock()


def log(line):
    with LOCK:
        with open(LOG, "a") as f:
            f.write(line + "\n")


def git_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body=b"", headers=None, head=False):
        self.send_response(status)
        headers = dict(headers or {})
        headers.setdefault("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def authorized(self, repo):
        return not repo.gated or self.headers.get("Authorization") == "Bearer " + TOKEN

    def do_HEAD(self):
        self.route(head=True)

    def do_GET(self):
        self.route(head=False)

    def route(self, head):
        host = self.headers.get("Host", "")
        log("%s %s host=%s range=%s auth=%s" % (self.command, self.path, host, self.headers.get("Range"),
                                                "yes" if self.headers.get("Authorization") else "no"))
        parts = self.path.split("/")
        if self.path.startswith("/cdn/"):
            return self.cdn(parts[2], host, head)
        if self.path.startswith("/api/models/") and len(parts) == 7 and parts[5] == "revision":
            repo = REPOS.get(parts[3] + "/" + parts[4])
            if repo is None:
                return self.send(404, b'{"error": "Repository not found"}')
            if not self.authorized(repo):
                return self.send(401, b'{"error": "Access to this model is restricted"}')
            if parts[6] not in ("main", repo.sha):
                return self.send(404, b'{"error": "Invalid rev id"}')
            siblings = [{"rfilename": f} for f in repo.files + ["pytorch_model.bin", "../escape.json"]]
            return self.send(200, json.dumps({"id": parts[3] + "/" + parts[4], "sha": repo.sha,
                                              "siblings": siblings}).encode())
        if len(parts) >= 6 and parts[3] == "resolve":
            repo = REPOS.get(parts[1] + "/" + parts[2])
            name = "/".join(parts[5:])
            if repo is None or name not in repo.files:
                return self.send(404, b"Entry not found", head=head)
            if not self.authorized(repo):
                return self.send(401, b"", head=head)
            data = open(os.path.join(repo.folder, name), "rb").read()
            if not name.endswith(".safetensors"):
                return self.send(200, data, {"ETag": '"%s"' % git_sha1(data), "X-Repo-Commit": repo.sha}, head)
            sha = hashlib.sha256(data).hexdigest()
            BLOBS[sha] = data
            if parts[2] == "norange":
                NORANGE.add(sha)
            etag = sha if not parts[2] == "badsum" else hashlib.sha256(b"other").hexdigest()
            port = self.server.server_address[1]
            return self.send(302, b"", {"Location": "http://localhost:%d/cdn/%s" % (port, sha),
                                        "X-Linked-Etag": '"%s"' % etag, "X-Linked-Size": str(len(data)),
                                        "X-Repo-Commit": repo.sha}, head)
        self.send(404, b"not found", head=head)

    def cdn(self, sha, host, head):
        if self.headers.get("Authorization"):
            log("LEAK: Authorization sent to the CDN host %s" % host)
        data = BLOBS.get(sha)
        if data is None:
            return self.send(404, b"", head=head)
        rng = self.headers.get("Range") if sha not in NORANGE else None
        start = int(rng.split("=")[1].split("-")[0]) if rng else 0
        body = data[start:]
        headers = {"Content-Length": str(len(body))}
        if rng:
            headers["Content-Range"] = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
        if not rng and sha not in CUT and len(body) > 1024:
            CUT.add(sha)  # the first full transfer stops halfway
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.send_response(206 if rng else 200)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)


def main():
    global LOG
    port, LOG = int(sys.argv[1]), sys.argv[2]
    for arg in sys.argv[3:]:
        gated = arg.startswith("gated:")
        name, folder = (arg[6:] if gated else arg).split("=", 1)
        REPOS[name] = Repo(folder, gated)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
