//! Asking less: a small on-disk store of GET responses, for revalidation (`cache = "revalidate"`)
//! and for development (`cache = "dev"`, the seed's HTTPCACHE_ENABLED).
//!
//! Entries live under `state_dir/cache/` as a JSON head (URL, status, headers, validators) and a
//! body file, keyed by a hash of the URL (the URL itself is stored and checked, so a collision is
//! a miss). The store is bounded in bytes and evicts the least recently used entries. Bodies are
//! written as they stream to the client and only become visible when complete. This module does
//! not decide when to use the store (the proxy does, in `proxy/cache/mod.rs`).

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use lru::LruCache;
use serde::{Deserialize, Serialize};
use tracing::{debug, warn};

/// The largest body stored; larger responses stream through unstored.
pub(crate) const MAX_ENTRY_BYTES: u64 = 8 * 1024 * 1024;

/// A stored response head.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Head {
    /// The absolute URL.
    pub url: String,
    /// The status (200).
    pub status: u16,
    /// Response headers (hop-by-hop headers already removed).
    pub headers: Vec<(String, String)>,
    /// `ETag`, if any.
    pub etag: Option<String>,
    /// `Last-Modified`, if any.
    pub last_modified: Option<String>,
    /// When it was stored (its response arrived: RFC 9111's `response_time`).
    pub stored_at_unix_ms: u64,
    /// When the request it answers was sent (`request_time`); 0 in an entry of an older
    /// courtesy, read as `stored_at_unix_ms`.
    #[serde(default)]
    pub requested_at_unix_ms: u64,
    /// Body size in bytes.
    pub size: u64,
    /// The request headers the response's `Vary` names, with the values they had (RFC 9111
    /// 4.1): a later request is answered from this entry only when it sends the same.
    #[serde(default)]
    pub vary: Vec<(String, Option<String>)>,
}

impl Head {
    /// The headers as a map (invalid ones skipped).
    pub(crate) fn header_map(&self) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in &self.headers {
            if let (Ok(k), Ok(v)) = (
                HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(v),
            ) {
                map.append(k, v);
            }
        }
        map
    }

    /// When it was asked for and received, for its age (RFC 9111 4.2.3).
    pub(crate) fn exchanged(&self) -> super::freshness::Exchanged {
        let at = |ms: u64| UNIX_EPOCH + std::time::Duration::from_millis(ms);
        let requested = match self.requested_at_unix_ms {
            0 => self.stored_at_unix_ms,
            ms => ms.min(self.stored_at_unix_ms),
        };
        super::freshness::Exchanged {
            requested: at(requested),
            received: at(self.stored_at_unix_ms),
        }
    }

    /// Makes `headers` a revalidation of this entry: its `ETag` as `If-None-Match`, its
    /// `Last-Modified` as `If-Modified-Since`. Returns whether it had a validator to send.
    pub(crate) fn add_validators(&self, headers: &mut HeaderMap) -> bool {
        let validators = [
            (http::header::IF_NONE_MATCH, self.etag.as_deref()),
            (
                http::header::IF_MODIFIED_SINCE,
                self.last_modified.as_deref(),
            ),
        ];
        let mut added = false;
        for (name, value) in validators {
            if let Some(v) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
                headers.insert(name, v);
                added = true;
            }
        }
        added
    }

    /// The status as a `StatusCode`.
    pub(crate) fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::OK)
    }

    /// Whether `request` sends what the stored response varies on, as the request it answered did.
    pub(crate) fn matches(&self, request: &HeaderMap) -> bool {
        self.vary
            .iter()
            .all(|(name, value)| joined(request, name).as_deref() == value.as_deref())
    }
}

/// Every value of header `name` in `headers`, joined with ", " (as RFC 9110 5.3 combines them).
fn joined(headers: &HeaderMap, name: &str) -> Option<String> {
    let values: Vec<&str> = headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::trim)
        .collect();
    (!values.is_empty()).then(|| values.join(", "))
}

/// The request headers `response` varies on with their values in `request`; `None` for
/// `Vary: *` (never answered from a store).
pub(crate) fn vary_of(
    response: &HeaderMap,
    request: &HeaderMap,
) -> Option<Vec<(String, Option<String>)>> {
    let mut vary = Vec::new();
    for value in response.get_all(http::header::VARY) {
        for name in value.to_str().unwrap_or("*").split(',') {
            let name = name.trim().to_ascii_lowercase();
            if name == "*" {
                return None;
            }
            if !name.is_empty() && !vary.iter().any(|(n, _)| *n == name) {
                let value = joined(request, &name);
                vary.push((name, value));
            }
        }
    }
    Some(vary)
}

/// A file only this user can read, created (or emptied) for writing: cached responses may carry
/// what a site showed one client.
fn private_file(path: &Path) -> std::io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// The response store, shared by all requests. Every read and write runs on the store's own
/// thread, in the order asked ([`ResponseStore::head_off_workers`] and [`ResponseStore::get_off_workers`] wait for
/// their answer without blocking a worker): no file is read or written on an async worker, and a
/// response whose body reached its client is found by the client's next request.
pub(crate) struct ResponseStore {
    core: Arc<Core>,
    jobs: mpsc::Sender<Job>,
}

/// What the readers and the writer thread share.
struct Core {
    dir: PathBuf,
    max_bytes: u64,
    /// Entry name → size, in least-recently-used order.
    index: Mutex<LruCache<u64, u64>>,
    /// Entry name → writers that finished and whose commit the writer thread has not done yet:
    /// such an entry is about to be there, and a read queued now will find it.
    committing: Mutex<HashMap<u64, u32>>,
    total: AtomicU64,
}

/// Work for the writer thread, in the order it was asked for.
enum Job {
    /// Create the temporary file of writer `id`.
    Start { id: u64, tmp: PathBuf },
    /// Append a chunk to writer `id`'s file.
    Append { id: u64, chunk: Bytes },
    /// Writer `id` is complete: make its entry (numbered `entry`) visible.
    Commit {
        id: u64,
        entry: u64,
        head: Head,
        size: u64,
    },
    /// Writer `id` was abandoned: remove its file.
    Abort { id: u64 },
    /// Replace the head of a stored entry (freshened by a 304), its body kept.
    Refresh { head: Head },
    /// Read the entry for `url` (with its body when `body`), after every earlier write.
    Read {
        url: String,
        body: bool,
        reply: tokio::sync::oneshot::Sender<Option<(Head, Bytes)>>,
    },
    /// Answer once every earlier job is done.
    #[cfg(test)]
    Flush(mpsc::Sender<()>),
    /// Do nothing more until told (a test's stand-in for a busy disk).
    #[cfg(test)]
    Stall(mpsc::Receiver<()>),
}

impl std::fmt::Debug for ResponseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseStore")
            .field("dir", &self.core.dir)
            .finish()
    }
}

impl ResponseStore {
    /// Opens (and indexes) the store in `dir`, bounded to `max_bytes`, and starts its writer
    /// thread (it ends when the store and its last writer are gone).
    pub(crate) fn open(dir: PathBuf, max_bytes: u64) -> ResponseStore {
        let mut entries: Vec<(SystemTime, u64, u64)> = Vec::new();
        if let Ok(read) = fs::read_dir(&dir) {
            for e in read.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                let id = name
                    .strip_suffix(".body")
                    .and_then(|stem| u64::from_str_radix(stem, 16).ok());
                if let (Some(id), Ok(meta)) = (id, e.metadata()) {
                    let when = meta.modified().unwrap_or(UNIX_EPOCH);
                    entries.push((when, id, meta.len()));
                }
            }
        }
        entries.sort();
        let mut index = LruCache::unbounded();
        let mut total = 0;
        for (_, name, size) in entries {
            total += size;
            index.put(name, size);
        }
        let core = Arc::new(Core {
            dir,
            max_bytes,
            index: Mutex::new(index),
            committing: Mutex::new(HashMap::new()),
            total: AtomicU64::new(total),
        });
        let (jobs, queue) = mpsc::channel();
        let writer_core = core.clone();
        let started = std::thread::Builder::new()
            .name("courtesy-cache".into())
            .spawn(move || writer_core.run(queue));
        if let Err(e) = started {
            warn!("cannot start the cache writer ({e}); responses will not be stored");
        }
        ResponseStore { core, jobs }
    }

    /// The entry's number: a hash of its key (the files are named by it in hex).
    fn id(url: &str) -> u64 {
        let mut h = DefaultHasher::new();
        url.hash(&mut h);
        h.finish()
    }

    fn name(url: &str) -> String {
        format!("{:016x}", ResponseStore::id(url))
    }

    /// The stored head for `url`, if any (and marks it recently used). Reads a file: on the
    /// request path, [`ResponseStore::head_off_workers`].
    #[cfg(test)]
    pub(crate) fn head(&self, url: &str) -> Option<Head> {
        self.core.head(url)
    }

    /// The stored head and body for `url`, if any. Reads up to [`MAX_ENTRY_BYTES`] from disk: on
    /// the request path, [`ResponseStore::get_off_workers`].
    #[cfg(test)]
    pub(crate) fn get(&self, url: &str) -> Option<(Head, Bytes)> {
        self.core.get(url)
    }

    /// [`ResponseStore::head`] on the store's thread, after every write asked for before (so a response
    /// that has reached its client is found).
    pub(crate) async fn head_off_workers(&self, url: &str) -> Option<Head> {
        self.read(url, false).await.map(|(head, _)| head)
    }

    /// [`ResponseStore::get`] on the store's thread, after every write asked for before.
    pub(crate) async fn get_off_workers(&self, url: &str) -> Option<(Head, Bytes)> {
        self.read(url, true).await
    }

    async fn read(&self, url: &str, body: bool) -> Option<(Head, Bytes)> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = Job::Read {
            url: url.to_string(),
            body,
            reply,
        };
        self.jobs.send(job).ok()?;
        answer.await.ok().flatten()
    }

    /// Whether the store may hold an entry for `url` (or is about to: its commit is queued, and
    /// a read queued after it finds it): a look at the in-memory index, no file read, so that a
    /// request the store cannot answer costs a hash and a lock.
    pub(crate) fn may_hold(&self, url: &str) -> bool {
        let id = ResponseStore::id(url);
        crate::util::locks::lock(&self.core.index).contains(&id)
            || crate::util::locks::lock(&self.core.committing).contains_key(&id)
    }

    /// Replaces the head of `head.url`'s entry with `head` (freshened by a 304, RFC 9111 4.3.4),
    /// its body kept; on the store's thread, after every earlier write.
    pub(crate) fn refresh(&self, head: Head) {
        let _ = self.jobs.send(Job::Refresh { head });
    }

    /// Starts storing a response for `url`.
    pub(crate) fn writer(&self, head: Head) -> Option<Writer> {
        static WRITERS: AtomicU64 = AtomicU64::new(0);
        let id = WRITERS.fetch_add(1, Ordering::Relaxed);
        let tmp = self.core.dir.join(format!(
            "{}.tmp-{}-{id}",
            ResponseStore::name(&head.url),
            std::process::id()
        ));
        self.jobs.send(Job::Start { id, tmp }).ok()?;
        Some(Writer {
            jobs: self.jobs.clone(),
            core: self.core.clone(),
            id,
            head,
            written: 0,
            open: true,
        })
    }

    /// Waits until the writer thread has done everything asked of it so far.
    #[cfg(test)]
    pub(crate) fn flush(&self) {
        let (done, wait) = mpsc::channel();
        if self.jobs.send(Job::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
    }

    /// Holds the writer thread until the returned sender is dropped or sent to.
    #[cfg(test)]
    fn stall(&self) -> mpsc::Sender<()> {
        let (go, wait) = mpsc::channel();
        let _ = self.jobs.send(Job::Stall(wait));
        go
    }

    /// Bytes stored (tests check the bound).
    #[cfg(test)]
    pub(crate) fn total_bytes(&self) -> u64 {
        self.core.total.load(Ordering::Relaxed)
    }
}

impl Core {
    fn head(&self, url: &str) -> Option<Head> {
        let name = ResponseStore::name(url);
        let text = fs::read_to_string(self.dir.join(format!("{name}.json"))).ok()?;
        let head: Head = serde_json::from_str(&text).ok()?;
        if head.url != url {
            return None;
        }
        crate::util::locks::lock(&self.index).get(&ResponseStore::id(url));
        Some(head)
    }

    fn get(&self, url: &str) -> Option<(Head, Bytes)> {
        let head = self.head(url)?;
        let body = fs::read(self.dir.join(format!("{}.body", ResponseStore::name(url)))).ok()?;
        (body.len() as u64 == head.size).then(|| (head, Bytes::from(body)))
    }

    /// The writer thread: the open temporary files, and the jobs in order.
    fn run(&self, queue: mpsc::Receiver<Job>) {
        let mut files: HashMap<u64, (PathBuf, fs::File)> = HashMap::new();
        let mut dir_made = false;
        while let Ok(job) = queue.recv() {
            match job {
                Job::Start { id, tmp } => {
                    if !dir_made {
                        if let Err(e) = fs::create_dir_all(&self.dir) {
                            warn!(
                                "cannot create the cache directory {}: {e}",
                                self.dir.display()
                            );
                            continue;
                        }
                        use std::os::unix::fs::PermissionsExt as _;
                        let _ = fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700));
                        dir_made = true;
                    }
                    if let Ok(file) = private_file(&tmp) {
                        files.insert(id, (tmp, file));
                    }
                }
                Job::Append { id, chunk } => {
                    let failed = files
                        .get_mut(&id)
                        .is_some_and(|(_, file)| file.write_all(&chunk).is_err());
                    if failed {
                        if let Some((tmp, _)) = files.remove(&id) {
                            let _ = fs::remove_file(tmp);
                        }
                    }
                }
                Job::Commit {
                    id,
                    entry,
                    head,
                    size,
                } => {
                    if let Some((tmp, file)) = files.remove(&id) {
                        drop(file);
                        self.commit(head, &tmp, size);
                    }
                    self.committed(entry);
                }
                Job::Abort { id } => {
                    if let Some((tmp, _)) = files.remove(&id) {
                        let _ = fs::remove_file(tmp);
                    }
                }
                Job::Refresh { head } => self.refresh(head),
                Job::Read { url, body, reply } => {
                    let found = if body {
                        self.get(&url)
                    } else {
                        self.head(&url).map(|head| (head, Bytes::new()))
                    };
                    let _ = reply.send(found);
                }
                #[cfg(test)]
                Job::Flush(done) => {
                    let _ = done.send(());
                }
                #[cfg(test)]
                Job::Stall(wait) => {
                    let _ = wait.recv();
                }
            }
        }
        for (tmp, _) in files.into_values() {
            let _ = fs::remove_file(tmp);
        }
    }

    /// Marks that a commit of entry `entry` was asked for (before it is queued).
    fn committing(&self, entry: u64) {
        *crate::util::locks::lock(&self.committing)
            .entry(entry)
            .or_insert(0) += 1;
    }

    /// A commit of entry `entry` is done, stored or not.
    fn committed(&self, entry: u64) {
        let mut committing = crate::util::locks::lock(&self.committing);
        if let Some(count) = committing.get_mut(&entry) {
            *count -= 1;
            if *count == 0 {
                committing.remove(&entry);
            }
        }
    }

    /// Writes `head` over its entry's head, when the entry is there with the body it describes.
    fn refresh(&self, mut head: Head) {
        let name = ResponseStore::name(&head.url);
        let id = ResponseStore::id(&head.url);
        let Some(size) = crate::util::locks::lock(&self.index).get(&id).copied() else {
            return;
        };
        head.size = size;
        let meta = self.dir.join(format!("{name}.json"));
        let json = serde_json::to_vec(&head).unwrap_or_default();
        let result = private_file(&meta.with_extension("json.tmp"))
            .and_then(|mut file| file.write_all(&json))
            .and_then(|()| fs::rename(meta.with_extension("json.tmp"), &meta));
        if let Err(e) = result {
            warn!("cannot refresh {} in the cache: {e}", head.url);
        }
    }

    fn commit(&self, mut head: Head, tmp: &Path, size: u64) {
        let name = ResponseStore::name(&head.url);
        head.size = size;
        let body = self.dir.join(format!("{name}.body"));
        let meta = self.dir.join(format!("{name}.json"));
        let json = serde_json::to_vec(&head).unwrap_or_default();
        let result = fs::rename(tmp, &body)
            .and_then(|()| private_file(&meta.with_extension("json.tmp"))?.write_all(&json))
            .and_then(|()| fs::rename(meta.with_extension("json.tmp"), &meta));
        if let Err(e) = result {
            warn!("cannot store {} in the cache: {e}", head.url);
            let _ = fs::remove_file(tmp);
            return;
        }
        let mut index = crate::util::locks::lock(&self.index);
        if let Some(old) = index.put(ResponseStore::id(&head.url), size) {
            self.total.fetch_sub(old, Ordering::Relaxed);
        }
        self.total.fetch_add(size, Ordering::Relaxed);
        while self.total.load(Ordering::Relaxed) > self.max_bytes {
            let Some((victim, victim_size)) = index.pop_lru() else {
                break;
            };
            let _ = fs::remove_file(self.dir.join(format!("{victim:016x}.body")));
            let _ = fs::remove_file(self.dir.join(format!("{victim:016x}.json")));
            self.total.fetch_sub(victim_size, Ordering::Relaxed);
            debug!(entry = %format!("{victim:016x}"), "evicted from the cache");
        }
    }
}

/// A response body being stored as it streams; committed only when complete. It only hands
/// chunks to the writer thread: nothing here touches the disk.
pub struct Writer {
    jobs: mpsc::Sender<Job>,
    /// The store, told of the commit before it is queued.
    core: Arc<Core>,
    id: u64,
    head: Head,
    written: u64,
    /// Still storing (not given up, finished or abandoned).
    open: bool,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("url", &self.head.url)
            .finish()
    }
}

impl Writer {
    /// Appends a chunk (copied); see [`Writer::write_bytes`].
    pub fn write(&mut self, chunk: &[u8]) {
        self.write_bytes(&Bytes::copy_from_slice(chunk));
    }

    /// Appends a chunk; gives up (silently, the client is unaffected) past [`MAX_ENTRY_BYTES`].
    pub fn write_bytes(&mut self, chunk: &Bytes) {
        if !self.open {
            return;
        }
        self.written += chunk.len() as u64;
        let job = Job::Append {
            id: self.id,
            chunk: chunk.clone(),
        };
        if self.written > MAX_ENTRY_BYTES || self.jobs.send(job).is_err() {
            self.abandon();
        }
    }

    /// The body ended: make the entry visible.
    pub fn finish(mut self) {
        if self.open {
            self.open = false;
            let entry = ResponseStore::id(&self.head.url);
            self.core.committing(entry);
            let commit = Job::Commit {
                id: self.id,
                entry,
                head: self.head.clone(),
                size: self.written,
            };
            if self.jobs.send(commit).is_err() {
                self.core.committed(entry);
            }
        }
    }

    fn abandon(&mut self) {
        if self.open {
            self.open = false;
            let _ = self.jobs.send(Job::Abort { id: self.id });
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Not finished (client gone, upstream error, too large): nothing becomes visible.
        self.abandon();
    }
}

/// `headers` as a head keeps them: name and value as text (a value that is not text is left
/// out).
pub(crate) fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect()
}

/// A head for `url` from a response's status and headers.
pub(crate) fn head_of(url: &str, status: StatusCode, headers: &HeaderMap) -> Head {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    Head {
        url: url.to_string(),
        status: status.as_u16(),
        headers: header_pairs(headers),
        etag: get("etag"),
        last_modified: get("last-modified"),
        stored_at_unix_ms: unix_ms(SystemTime::now()),
        requested_at_unix_ms: 0,
        size: 0,
        vary: Vec::new(),
    }
}

/// Milliseconds since the Unix epoch of `at` (0 before it).
pub(crate) fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Whether the response to `request` may be stored and answer later requests: [`storable`],
/// not `Vary: *`, not personal ([`personal`]: a request with `Cookie`, an answer with
/// `Set-Cookie`), and, for a request with `Authorization`, only a response that says `public`,
/// `s-maxage` or `must-revalidate` (RFC 9111 3.5; courtesy keys such an entry by the credentials
/// as well, so it never answers another client).
pub(crate) fn storable_for(status: StatusCode, response: &HeaderMap, request: &HeaderMap) -> bool {
    if !storable(status, response)
        || personal(request, response)
        || vary_of(response, request).is_none()
    {
        return false;
    }
    if request.contains_key(http::header::AUTHORIZATION) {
        let cache_control = joined(response, "cache-control")
            .unwrap_or_default()
            .to_ascii_lowercase();
        return cache_control
            .split(',')
            .map(|d| d.trim().split('=').next().unwrap_or(""))
            .any(|d| matches!(d, "public" | "s-maxage" | "must-revalidate"));
    }
    true
}

/// Whether an exchange is one client's own, never stored nor answered from the store: a request
/// that sends `Cookie` (the answer may be personalised by it, and courtesy cannot tell) or an
/// answer that sets one (`Set-Cookie` replayed to another client would hand it the first one's
/// session). RFC 9111 3.5 names only `Authorization`; cookies are the same thing in practice,
/// which is why shared caches (Squid, Varnish's default) pass both by.
pub(crate) fn personal(request: &HeaderMap, response: &HeaderMap) -> bool {
    request.contains_key(http::header::COOKIE) || response.contains_key(http::header::SET_COOKIE)
}

/// Whether a response may be stored at all: a 200 that does not say `no-store` or `private`.
pub(crate) fn storable(status: StatusCode, headers: &HeaderMap) -> bool {
    let cache_control = headers
        .get_all(http::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",")
        .to_ascii_lowercase();
    status == StatusCode::OK
        && !cache_control.contains("no-store")
        && !cache_control.contains("private")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        crate::util::scratch::dir(&format!("cache-{tag}"))
    }

    fn headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("etag", HeaderValue::from_static("\"v1\""));
        h.insert("content-type", HeaderValue::from_static("text/html"));
        h
    }

    #[test]
    fn authorized_and_varying_answers_are_stored_only_as_rfc_9111_allows() {
        let mut request = HeaderMap::new();
        request.insert("accept-language", HeaderValue::from_static("en"));
        let mut response = headers();
        assert!(storable_for(StatusCode::OK, &response, &request));
        response.insert("vary", HeaderValue::from_static("Accept-Language, Accept"));
        let vary = vary_of(&response, &request).unwrap();
        assert_eq!(
            vary,
            [
                ("accept-language".to_string(), Some("en".to_string())),
                ("accept".to_string(), None)
            ]
        );
        let head = Head {
            vary,
            ..head_of("http://a.test/", StatusCode::OK, &response)
        };
        assert!(head.matches(&request));
        let mut other = request.clone();
        other.insert("accept-language", HeaderValue::from_static("fr"));
        assert!(!head.matches(&other));
        other.insert("accept-language", HeaderValue::from_static("en"));
        other.insert("accept", HeaderValue::from_static("text/html"));
        assert!(
            !head.matches(&other),
            "a header the stored request did not send"
        );
        response.insert("vary", HeaderValue::from_static("*"));
        assert!(!storable_for(StatusCode::OK, &response, &request));

        let mut authorized = HeaderMap::new();
        authorized.insert("authorization", HeaderValue::from_static("Bearer x"));
        let plain = headers();
        assert!(!storable_for(StatusCode::OK, &plain, &authorized));
        for directive in [
            "public",
            "s-maxage=60",
            "must-revalidate",
            "max-age=5, Public",
        ] {
            let mut shared = headers();
            shared.insert("cache-control", HeaderValue::from_str(directive).unwrap());
            assert!(
                storable_for(StatusCode::OK, &shared, &authorized),
                "{directive}"
            );
        }
    }

    #[test]
    fn cookies_make_an_exchange_personal_and_unstored() {
        let plain = HeaderMap::new();
        assert!(storable_for(StatusCode::OK, &headers(), &plain));
        let mut cookie = HeaderMap::new();
        cookie.insert("cookie", HeaderValue::from_static("session=alice"));
        let mut public = headers();
        public.insert("cache-control", HeaderValue::from_static("public"));
        assert!(!storable_for(StatusCode::OK, &public, &cookie));
        let mut sets = public.clone();
        sets.insert("set-cookie", HeaderValue::from_static("session=alice"));
        assert!(!storable_for(StatusCode::OK, &sets, &plain));
        assert!(personal(&cookie, &plain) && personal(&plain, &sets));
        assert!(!personal(&plain, &public));
    }

    #[test]
    fn entries_appear_only_when_complete() {
        let store = ResponseStore::open(temp("complete"), 1 << 20);
        let url = "http://a.test/page";
        let mut w = store
            .writer(head_of(url, StatusCode::OK, &headers()))
            .unwrap();
        w.write(b"hello ");
        assert!(store.get(url).is_none(), "not visible before the end");
        w.write(b"world");
        w.finish();
        store.flush();
        let (head, body) = store.get(url).unwrap();
        assert_eq!(&body[..], b"hello world");
        assert_eq!(head.etag.as_deref(), Some("\"v1\""));
        assert_eq!(head.header_map()["content-type"], "text/html");
        let abandoned = store
            .writer(head_of("http://a.test/other", StatusCode::OK, &headers()))
            .unwrap();
        drop(abandoned);
        store.flush();
        assert!(store.get("http://a.test/other").is_none());
    }

    #[test]
    fn a_finished_entry_is_found_before_the_disk_has_written_it() {
        let store = ResponseStore::open(temp("committing"), 1 << 20);
        let url = "http://a.test/style.css";
        let mut w = store
            .writer(head_of(url, StatusCode::OK, &headers()))
            .unwrap();
        w.write(b"body");
        let go = store.stall();
        assert!(!store.may_hold(url), "not before its body ended");
        w.finish();
        assert!(
            store.may_hold(url),
            "the next request looks, and its read is queued after the commit"
        );
        drop(go);
        store.flush();
        assert!(store.may_hold(url) && store.get(url).is_some());
        let gone = store
            .writer(head_of("http://a.test/gone", StatusCode::OK, &headers()))
            .unwrap();
        drop(gone);
        store.flush();
        assert!(!store.may_hold("http://a.test/gone"), "an abandoned entry");
        let empty = crate::util::locks::lock(&store.core.committing).is_empty();
        assert!(empty, "every commit asked for was done");
    }

    #[test]
    fn the_store_is_bounded_and_evicts_the_least_recently_used() {
        let dir = temp("bounded");
        let store = ResponseStore::open(dir.clone(), 25);
        for name in ["a", "b", "c"] {
            let mut w = store
                .writer(head_of(
                    &format!("http://t/{name}"),
                    StatusCode::OK,
                    &headers(),
                ))
                .unwrap();
            w.write(&[0u8; 10]);
            w.finish();
            store.flush();
            if name == "b" {
                store.head("http://t/a"); // touch a: b becomes the oldest
            }
        }
        assert!(store.total_bytes() <= 25);
        assert!(
            store.get("http://t/b").is_none(),
            "b was least recently used"
        );
        assert!(store.get("http://t/a").is_some() && store.get("http://t/c").is_some());
        // Reopening finds the entries again.
        let again = ResponseStore::open(dir, 25);
        assert_eq!(again.total_bytes(), 20);
    }

    #[test]
    fn only_plain_200s_are_storable() {
        assert!(storable(StatusCode::OK, &headers()));
        assert!(!storable(StatusCode::NOT_FOUND, &headers()));
        let mut h = headers();
        h.insert(
            "cache-control",
            HeaderValue::from_static("private, max-age=0"),
        );
        assert!(!storable(StatusCode::OK, &h));
    }
}
