//! The fleet example (issue 37, "A fleet example"): deploy/kubernetes's
//! manifests pass a strict schema validator, and the host starts with
//! exactly the arguments and environment its StatefulSet gives the
//! container (the Secret's token, the ConfigMap's files mounted where the
//! container has them), answers its probes, takes a capsule the way a
//! scheduler places one, serves it on the shared port by host name, is
//! scraped as the Prometheus job scrapes it, and exits 0 on SIGTERM within
//! the pod's grace period.
//!
//! A container's paths are mapped under a directory of the test's own (its
//! `/state` volume and `/etc/murmur` mount), and each container port to a
//! free port of this machine, in the arguments, the environment and the
//! ConfigMap's files alike; nothing else is changed.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::tempdir::TempDir;
use common::{binary, request, root};
use serde::Deserialize;
use serde_json::json;
use serde_yaml::Value as Yaml;

const MANIFESTS: &str = "deploy/kubernetes/murmur-door.yaml";

/// Every resource of the manifests file, by kind.
fn resources() -> BTreeMap<String, Yaml> {
    let text = std::fs::read_to_string(root().join(MANIFESTS)).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| {
            let resource = Yaml::deserialize(document).unwrap();
            let kind = resource["kind"].as_str().unwrap().to_string();
            let name = resource["metadata"]["name"].as_str().unwrap().to_string();
            (format!("{kind}/{name}"), resource)
        })
        .collect()
}

fn text(value: &Yaml) -> &str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("expected a string: {value:?}"))
}

/// `text` with each container path and port mapped to this machine's.
fn mapped(text: &str, paths: &[(String, String)], ports: &BTreeMap<u64, u16>) -> String {
    let mut text = text.to_string();
    for (container, here) in paths {
        text = text.replace(container.as_str(), here);
    }
    for (container, here) in ports {
        text = text.replace(
            &format!("0.0.0.0:{container}"),
            &format!("127.0.0.1:{here}"),
        );
    }
    text
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Issue 37: "the manifests are checked by whatever validator can be
/// installed from the package registries".
#[test]
fn the_manifests_pass_a_strict_schema_validator() {
    let venv = root().join("target/deploy-venv");
    let python = common::setup::venv(&root().join("deploy/requirements.txt"), &venv)
        .unwrap_or_else(|e| panic!("installing the validator: {e}"));
    let validator = python.with_file_name("kubernetes-validate");
    let output = Command::new(validator)
        .args(["--strict", "--kubernetes-version", "1.37.0"])
        .arg(root().join(MANIFESTS))
        .output()
        .unwrap();
    let shown = common::setup::show(&output);
    assert!(output.status.success(), "{shown}");
    assert!(!shown.contains("ERROR"), "{shown}");
    // Each resource was checked: the validator names it.
    for resource in resources().keys() {
        let named = resource.to_lowercase();
        assert!(
            shown.contains(&format!("passed for resource {named}")),
            "{resource}: {shown}"
        );
    }
}

/// The host, started as the StatefulSet's container: its mounts under
/// `dir`, its ports mapped to free ones of this machine.
struct Container {
    child: std::process::Child,
    _dir: TempDir,
    paths: Vec<(String, String)>,
    ports: BTreeMap<u64, u16>,
    /// Container ports by name.
    named: BTreeMap<String, u64>,
    /// The Secret's control token.
    token: String,
    /// Its log, read so that its writes never block or fail.
    _stderr: std::sync::mpsc::Receiver<String>,
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Container {
    fn start(resources: &BTreeMap<String, Yaml>) -> Container {
        let set = &resources["StatefulSet/murmur-door"]["spec"]["template"];
        let pod = &set["spec"];
        let container = &pod["containers"][0];
        let secret = &resources["Secret/murmur-door-control"]["stringData"];
        let config = &resources["ConfigMap/murmur-door-capsules"]["data"];

        // The container's image runs these arguments (deploy/Containerfile).
        let args: Vec<String> = container["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| text(a).to_string())
            .collect();
        let containerfile = std::fs::read_to_string(root().join("deploy/Containerfile")).unwrap();
        assert!(
            containerfile.contains(&format!(
                "CMD {}",
                serde_json::to_string(&args).unwrap().replace(",", ", ")
            )),
            "{containerfile}"
        );
        assert!(containerfile.contains("ENTRYPOINT [\"/murmur-door\"]"));

        // Its mounts, under a directory of the test's own.
        let dir = TempDir::new("deploy");
        let mut paths = Vec::new();
        for mount in container["volumeMounts"].as_sequence().unwrap() {
            let at = text(&mount["mountPath"]).to_string();
            let here = dir.path().join(at.trim_start_matches('/'));
            std::fs::create_dir_all(&here).unwrap();
            paths.push((at, here.display().to_string()));
        }
        let mut ports = BTreeMap::new();
        let mut named = BTreeMap::new();
        for port in container["ports"].as_sequence().unwrap() {
            let number = port["containerPort"].as_u64().unwrap();
            ports.insert(number, free_port());
            named.insert(text(&port["name"]).to_string(), number);
        }
        let config_dir =
            Path::new(&paths.iter().find(|(at, _)| at == "/etc/murmur").unwrap().1).to_path_buf();
        for (name, content) in config.as_mapping().unwrap() {
            std::fs::write(
                config_dir.join(text(name)),
                mapped(text(content), &paths, &ports),
            )
            .unwrap();
        }
        // Exactly its environment: a scratch image has no other.
        let mut env = BTreeMap::new();
        for var in container["env"].as_sequence().unwrap() {
            let value = match var.get("value") {
                Some(value) => text(value).to_string(),
                None => {
                    let from = &var["valueFrom"]["secretKeyRef"];
                    assert_eq!(text(&from["name"]), "murmur-door-control");
                    text(&secret[text(&from["key"])]).to_string()
                }
            };
            env.insert(
                text(&var["name"]).to_string(),
                mapped(&value, &paths, &ports),
            );
        }
        let token = text(&secret["token"]).to_string();
        let mut child = Command::new(binary())
            .args(args.iter().map(|a| mapped(a, &paths, &ports)))
            .env_clear()
            .envs(&env)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = common::stderr_lines(&mut child);
        loop {
            let line = stderr
                .recv_timeout(Duration::from_secs(60))
                .expect("the host announces its control url");
            if line.contains("host listening") {
                break;
            }
        }
        Container {
            child,
            _dir: dir,
            paths,
            ports,
            named,
            token,
            _stderr: stderr,
        }
    }

    /// 127.0.0.1 and the port the container port `name` is mapped to.
    fn local(&self, name: &str) -> String {
        format!("127.0.0.1:{}", self.ports[&self.named[name]])
    }
}

/// Issue 37: "a test starts the binary with exactly the arguments and
/// environment the manifests give the container, and checks the probe
/// paths answer".
#[test]
fn the_host_runs_as_the_statefulset_gives_it_and_answers_its_probes() {
    let resources = resources();
    let set = &resources["StatefulSet/murmur-door"]["spec"]["template"];
    let pod = &set["spec"];
    let container = &pod["containers"][0];
    let mut host = Container::start(&resources);
    let (paths, ports, token) = (&host.paths, &host.ports, &host.token);
    let local = |name: &str| host.local(name);

    // The probes, as the kubelet sends them.
    for probe in ["readinessProbe", "livenessProbe"] {
        let get = &container[probe]["httpGet"];
        let reply = request(
            &local(text(&get["port"])),
            "GET",
            text(&get["path"]),
            &[],
            b"",
        );
        assert_eq!(reply.status, 200, "{probe}");
        assert_eq!(reply.json(), json!({"status": "ok"}), "{probe}");
    }

    // A scheduler places a capsule on host murmur-door-0 (README, "Running
    // a fleet"), with the Secret's token.
    let control = local("control");
    let auth = format!("Bearer {token}");
    let state = mapped("/state/capsules/alpha", paths, ports);
    let name = "alpha.murmur-door-0.capsules.example.com";
    let entry =
        json!({"name": "alpha", "manifest": "agent.yaml", "hostnames": [name], "state": state});
    let reply = request(
        &control,
        "POST",
        "/capsules",
        &[("authorization", &auth)],
        entry.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 201, "{}", reply.text());
    // The Ingress sends it to the host's one port, by host name.
    let head = format!(
        "GET /.well-known/agent-card.json HTTP/1.1\r\nhost: {name}\r\nconnection: close\r\n\r\n"
    );
    let card = common::exchange(&local("capsules"), head.as_bytes(), b"");
    assert_eq!(card.status, 200);
    assert_eq!(card.json()["name"], "agent");

    // Scraped as prometheus-scrape.yaml scrapes it: the annotations' port
    // and path, the Secret's token.
    let annotations = &set["metadata"]["annotations"];
    let port: u64 = text(&annotations["prometheus.io/port"]).parse().unwrap();
    let metrics = request(
        &format!("127.0.0.1:{}", ports[&port]),
        "GET",
        text(&annotations["prometheus.io/path"]),
        &[("authorization", &auth)],
        b"",
    );
    assert_eq!(metrics.status, 200);
    assert!(
        metrics.text().contains("murmur_door_capsules 1"),
        "{}",
        metrics.text()
    );

    // SIGTERM: exits 0 within the pod's grace period.
    let grace = Duration::from_secs(pod["terminationGracePeriodSeconds"].as_u64().unwrap());
    let started = Instant::now();
    // SAFETY: a signal to a child this test started.
    unsafe { libc::kill(host.child.id() as i32, libc::SIGTERM) };
    loop {
        if let Some(status) = host.child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(
            started.elapsed() < grace,
            "the host outlived its grace period"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
