"""A stand-in Hugging Face endpoint on loopback for tests: the hub's API and resolve routes and
a CDN that serves the file bytes, as huggingface_hub expects them."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

_COMMIT = re.compile(r"[0-9a-f]{40}")


# ---------------------------------------------------------------------------------------------
class StandInHub:
    """Two loopback servers: the hub (API and resolve routes) and a CDN (file bytes)."""

    def __init__(self):
        self.repos: dict = {}     # repo_id -> refs {rev: commit}, files {commit: {path: bytes}}
        self.blobs: dict = {}     # sha256 -> bytes
        self.seen: list = []      # (server, method, path, authorization header)
        self.lock = threading.Lock()
        self.hub = ThreadingHTTPServer(("127.0.0.1", 0), self._handler("hub"))
        self.cdn = ThreadingHTTPServer(("127.0.0.1", 0), self._handler("cdn"))
        self.threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05},
                                         daemon=True) for s in (self.hub, self.cdn)]
        for t in self.threads:
            t.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.hub.server_address[1]}"

    @property
    def cdn_url(self) -> str:
        return f"http://127.0.0.1:{self.cdn.server_address[1]}"

    def add_repo(self, repo_id: str, revisions: dict, *, card=None, list_files=True):
        """revisions: {revision name: {path in repo: bytes}}; each gets its own commit."""
        refs, files = {}, {}
        for rev, contents in revisions.items():
            # A revision written as a commit is that commit; a branch or tag gets its own.
            commit = rev if _COMMIT.fullmatch(rev) else hashlib.sha1(
                f"{repo_id}@{rev}".encode()).hexdigest()
            refs[rev] = commit
            files[commit] = dict(contents)
            for data in contents.values():
                self.blobs[hashlib.sha256(data).hexdigest()] = data
        self.repos[repo_id] = dict(refs=refs, files=files, card=card, list_files=list_files)

    def requests(self, server=None, method=None) -> list:
        with self.lock:
            return [r for r in self.seen if (server is None or r[0] == server)
                    and (method is None or r[1] == method)]

    def stop(self):
        for s in (self.hub, self.cdn):
            s.shutdown()
            s.server_close()
        for t in self.threads:
            t.join(timeout=10)

    # -- routes ---------------------------------------------------------------------------
    def _commit(self, repo, rev):
        if rev in repo["refs"]:
            return repo["refs"][rev]
        return rev if rev in repo["files"] else None

    def answer(self, role, method, raw_path):
        """-> (status, headers, body) for one request."""
        path = urlsplit(raw_path).path
        if role == "cdn":
            sha = path.rsplit("/", 1)[-1]
            if not path.startswith("/blobs/") or sha not in self.blobs:
                return 404, {}, b"no such blob"
            data = self.blobs[sha]
            return 200, {"ETag": f'"{sha}"', "Content-Length": str(len(data))}, data
        seg = path.split("/")
        if len(seg) >= 5 and seg[1] == "api" and seg[2] == "models":
            repo_id = f"{unquote(seg[3])}/{unquote(seg[4])}"
            rev = unquote(seg[6]) if len(seg) == 7 and seg[5] == "revision" else "main"
            return self._model_info(repo_id, rev)
        if len(seg) >= 6 and seg[3] == "resolve":
            repo_id = f"{unquote(seg[1])}/{unquote(seg[2])}"
            return self._resolve(repo_id, unquote(seg[4]), unquote("/".join(seg[5:])))
        return 404, {}, b"unknown route"

    def _model_info(self, repo_id, rev):
        repo = self.repos.get(repo_id)
        if repo is None:
            return 404, {"X-Error-Code": "RepoNotFound"}, b'{"error": "Repository not found"}'
        commit = self._commit(repo, rev)
        if commit is None:
            return 404, {"X-Error-Code": "RevisionNotFound"}, b'{"error": "Invalid rev id"}'
        info = {"id": repo_id, "sha": commit, "tags": ["gguf"]}
        if repo["list_files"]:
            info["siblings"] = [{"rfilename": p} for p in sorted(repo["files"][commit])]
        if repo["card"] is not None:
            info["cardData"] = repo["card"]
            if repo["card"].get("license"):
                info["tags"].append(f"license:{repo['card']['license']}")
        return 200, {"Content-Type": "application/json"}, json.dumps(info).encode()

    def _resolve(self, repo_id, rev, filename):
        repo = self.repos.get(repo_id)
        if repo is None:
            return 404, {"X-Error-Code": "RepoNotFound"}, b"Repository not found"
        commit = self._commit(repo, rev)
        if commit is None:
            return 404, {"X-Error-Code": "RevisionNotFound"}, b"Invalid rev id"
        data = repo["files"][commit].get(filename)
        if data is None:
            return (404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit},
                    b"Entry not found")
        sha = hashlib.sha256(data).hexdigest()
        return 302, {"Location": f"{self.cdn_url}/blobs/{sha}", "X-Repo-Commit": commit,
                     "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data)),
                     "ETag": f'"{hashlib.sha1(data).hexdigest()}"'}, b""

    def _handler(self, role):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, with_body):
                with hub.lock:
                    hub.seen.append((role, self.command, self.path,
                                     self.headers.get("Authorization")))
                status, headers, body = hub.answer(role, self.command, self.path)
                self.send_response(status)
                headers.setdefault("Content-Length", str(len(body)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if with_body:
                    self.wfile.write(body)

            def do_GET(self):
                self._serve(True)

            def do_HEAD(self):
                self._serve(False)

            def log_message(self, *args):
                pass

        return Handler


def point_at(hub: "StandInHub", monkeypatch, cache) -> None:
    """An empty dasllama cache at ``cache`` and huggingface_hub pointed at the stand-in."""
    monkeypatch.setenv("DASLLAMA_CACHE", str(cache))
    monkeypatch.delenv("DASLLAMA_MODELS", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
