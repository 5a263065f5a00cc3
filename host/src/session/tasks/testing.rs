//! Helpers for the tests of the hub and of what stands on it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::*;

/// A hub over an in-memory store, running tasks with `agent`.
pub fn hub_with(agent: impl Agent, acceptance: TaskAcceptance) -> Arc<Hub> {
    hub_buffered(agent, acceptance, events::DEFAULT_REPLAY_BUFFER)
}

/// [`hub_with`], its event log replaying `replay_buffer` events.
pub fn hub_buffered(
    agent: impl Agent,
    acceptance: TaskAcceptance,
    replay_buffer: usize,
) -> Arc<Hub> {
    Hub::new(
        Store::in_memory(now_ms()).unwrap(),
        Arc::new(agent),
        acceptance,
        replay_buffer,
    )
}

/// A message from `caller` whose text is `text`.
pub fn new_task(caller: Caller, text: &str) -> NewTask {
    NewTask {
        caller,
        context_id: None,
        text: text.to_string(),
        images: Vec::new(),
        reference_task_ids: Vec::new(),
        origin: Origin::Client,
        trust: None,
        forget_session: false,
        held: false,
    }
}

/// Waits until the task is in `state` (10 s at most), and answers it.
pub async fn until(hub: &Hub, id: &str, state: TaskState) -> Task {
    for _ in 0..2000 {
        let task = hub.get(&None, id).unwrap();
        if task.status.state == state {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{id} never reached {state:?}: {:?}", hub.get(&None, id));
}

/// Waits for the task to settle (10 s at most), and answers it.
pub async fn settle(hub: &Hub, id: &str) -> Task {
    let mut settled = hub.settled(&None, id).unwrap();
    tokio::time::timeout(Duration::from_secs(10), settled.wait())
        .await
        .expect("the task settles");
    hub.get(&None, id).unwrap()
}

/// Starts `text` as a task and waits for it to settle.
pub async fn run(hub: &Arc<Hub>, text: &str) -> Task {
    let task = hub.start(new_task(None, text)).unwrap();
    settle(hub, &task.id).await
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "murmur-door-{label}-{}-{}",
            std::process::id(),
            super::ids::work_id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
