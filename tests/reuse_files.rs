//! Issues 33 and 36: a file's answer the door declares reusable (a GET, a
//! HEAD or a 304 of a file reached with no link) is sent again without an
//! instance while its path reaches the same file, of the same size and last
//! change. Random interleavings of file writes (some that keep the size and
//! the time of the last change), replacements, removals, links on the way
//! and swaps, on two servers of one session: one keeping answers, one
//! answering every request on a fresh instance. Every answer of the first
//! must be byte for byte the second's, asked at the same moment by the same
//! caller.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::BodyExt;
use murmur_door_host::engine::{self, Door};
use murmur_door_host::manifest::Manifest;
use murmur_door_host::server::{HttpLimits, Server};
use murmur_door_host::session::Session;
use serde_json::Value;

use crate::common::tempdir::TempDir;
use crate::reuse::Lcg;

/// Bob holds no `resources/files`: he is refused, and nothing of his kept.
const MANIFEST: &str = "name: files\nversion: 0.1.0\nexports:\n  files: [out/**]\n\
network:\n  authentication:\n    scheme: bearer\n    credentials:\n      bob:\n        \
scopes: [GetTask]\n";

/// The files the run writes, removes and asks for, and one it never makes.
const PATHS: [&str; 5] = [
    "out/a.txt",
    "out/b.bin",
    "out/sub/c.md",
    "out/sub/d",
    "out/none",
];

type Answer = (u16, Vec<(String, String)>, Bytes);

async fn ask(server: &Server, method: &str, path: &str, headers: &[(String, String)]) -> Answer {
    let mut request = hyper::Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = server.respond(request.body(Bytes::new()).unwrap()).await;
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
        .collect();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, body)
}

struct Run {
    keeping: Server,
    fresh: Server,
    door: Door,
    work: PathBuf,
    tokens: Vec<String>,
    /// ETags answered so far, for If-None-Match and If-Range.
    etags: Vec<String>,
    random: Lcg,
}

impl Run {
    fn pick<'a>(&mut self, from: &'a [&'a str]) -> &'a str {
        from[self.random.below(from.len())]
    }

    fn file(&mut self) -> PathBuf {
        let path = self.pick(&PATHS[..4]);
        self.work.join(path)
    }

    /// One change to the workdir.
    fn change(&mut self) {
        let out = self.work.join("out");
        // A link on the way lasts one step.
        if std::fs::symlink_metadata(&out).is_ok_and(|m| m.file_type().is_symlink()) {
            return relink(&out);
        }
        let path = self.file();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let size = [0, 10, 4096][self.random.below(3)];
        let fill = b'a' + self.random.below(26) as u8;
        match self.random.below(6) {
            // New bytes, the same size and the same time of the last
            // change: an answer's head holds, its bytes are read anew.
            0 => {
                let Ok(before) = std::fs::metadata(&path) else {
                    return;
                };
                let len = before.len() as usize;
                std::fs::write(&path, vec![fill; len]).unwrap();
                let file = std::fs::File::options().write(true).open(&path).unwrap();
                file.set_modified(before.modified().unwrap()).unwrap();
            }
            1 => std::fs::write(&path, vec![fill; size]).unwrap(),
            // Another file in its place, with the old one's time.
            2 => {
                let modified = std::fs::metadata(&path).and_then(|m| m.modified());
                let new = path.with_extension("new");
                std::fs::write(&new, vec![fill; size]).unwrap();
                let file = std::fs::File::options().write(true).open(&new).unwrap();
                file.set_modified(modified.unwrap_or(SystemTime::UNIX_EPOCH))
                    .unwrap();
                std::fs::rename(&new, &path).unwrap();
            }
            3 => drop(std::fs::remove_file(&path)),
            // The directory on the way swapped for a link to a copy of it,
            // or back.
            4 => relink(&out),
            _ => {
                let file = std::fs::File::options().write(true).open(&path);
                if let Ok(file) = file {
                    let later =
                        SystemTime::now() + Duration::from_secs(self.random.below(9) as u64);
                    file.set_modified(later).unwrap();
                }
            }
        }
    }

    /// A request asked of both servers, twice: the second may be a kept
    /// answer, and must be what a fresh instance answers.
    async fn read(&mut self) {
        let method = self.pick(&["GET", "GET", "GET", "HEAD"]);
        let path = format!("/resources/files/{}", self.pick(&PATHS));
        let token = self.tokens[self.random.below(self.tokens.len())].clone();
        let mut headers = vec![("authorization".to_string(), format!("Bearer {token}"))];
        let etag = match self.etags.is_empty() {
            true => "\"none\"".to_string(),
            false => self.etags[self.random.below(self.etags.len())].clone(),
        };
        match self.random.below(5) {
            0 => headers.push(("range".into(), "bytes=2-5".into())),
            1 => headers.push(("if-none-match".into(), etag)),
            2 => {
                headers.push(("range".into(), "bytes=-3".into()));
                headers.push(("if-range".into(), etag));
            }
            _ => {}
        }
        for _ in 0..2 {
            let kept = ask(&self.keeping, method, &path, &headers).await;
            let fresh = ask(&self.fresh, method, &path, &headers).await;
            assert_eq!(kept, fresh, "{method} {path} {headers:?}");
            let etag = kept.1.iter().find(|(name, _)| name == "etag");
            if let Some((_, etag)) = etag.filter(|(_, e)| !self.etags.contains(e)) {
                self.etags.push(etag.clone());
            }
        }
    }
}

/// `dir` swapped for a link to a copy of it (the door follows it, and
/// declares nothing reusable through it), or the link for the directory.
fn relink(dir: &Path) {
    let real = dir.with_extension("real");
    match std::fs::symlink_metadata(dir).map(|m| m.file_type().is_symlink()) {
        Ok(true) => {
            std::fs::remove_file(dir).unwrap();
            std::fs::rename(&real, dir).unwrap();
        }
        _ => {
            std::fs::rename(dir, &real).unwrap();
            std::os::unix::fs::symlink("out.real", dir).unwrap();
        }
    }
}

#[test]
fn a_reused_file_answer_is_what_a_fresh_door_answers() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let engine = engine::engine().unwrap();
    let door = Door::load(&engine, engine::EMBEDDED_DOOR).unwrap();
    let manifest = Manifest::parse(MANIFEST).unwrap();
    let dir = TempDir::new("reuse-files");
    for seed in 1..=4u64 {
        let work = dir.path().join(format!("work-{seed}"));
        std::fs::create_dir_all(work.join("out/sub")).unwrap();
        for path in &PATHS[..4] {
            std::fs::write(work.join(path), path.as_bytes()).unwrap();
        }
        let session = runtime.block_on(async {
            let session = Session::launch(&manifest, "http://127.0.0.1:41873".into()).unwrap();
            Arc::new(session.with_workdir(work.clone()))
        });
        let file = dir.path().join(format!("tokens-{seed}.json"));
        session.tokens.write_file(&file).unwrap();
        let minted: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        let tokens = ["operator", "bob"].map(|name| minted[name].as_str().unwrap().to_string());
        let fresh_limits = HttpLimits {
            idle_instances: 0,
            reuse_bytes: 0,
            ..HttpLimits::default()
        };
        let mut run = Run {
            keeping: Server::new(door.clone(), session.clone()),
            fresh: Server::new(door.clone(), session.clone()).with_http_limits(fresh_limits),
            door: door.clone(),
            work,
            tokens: tokens.to_vec(),
            etags: Vec::new(),
            random: Lcg(seed),
        };
        let counts = run.keeping.doors.reuse_counts.clone();
        let steps = async {
            for _ in 0..1000 {
                match run.random.below(20) {
                    0..=5 => run.change(),
                    6 => drop(run.keeping.doors.install(run.door.clone(), "swap".into())),
                    _ => run.read().await,
                }
            }
        };
        crate::reuse::run_steps(&runtime, seed, steps, &counts, (50, 20));
    }
}
