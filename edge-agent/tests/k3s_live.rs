//! The k3s runtime against a live cluster: runs only where KUBECONFIG names one (and
//! the crate is built with `--features k3s`); otherwise prints that it skipped.
//! No cluster can run on the development machines, so the pod documents are covered
//! by the unit tests in `src/runtime/k3s.rs` instead.

#[test]
fn k3s_pod_lifecycle_on_a_live_cluster() {
    let kubeconfig = match std::env::var("KUBECONFIG") {
        Ok(k) if std::path::Path::new(&k).is_file() => k,
        _ => {
            println!("skipped k3s live test: KUBECONFIG names no cluster");
            return;
        }
    };
    live(&kubeconfig);
}

#[cfg(not(feature = "k3s"))]
fn live(_kubeconfig: &str) {
    println!("skipped k3s live test: build with --features k3s to run it");
}

#[cfg(feature = "k3s")]
fn live(kubeconfig: &str) {
    use edge_agent::reconciler::{spec_hash, RunState};
    use edge_agent::runtime::k3s::K3sRuntime;
    use edge_agent::runtime::Runtime;

    let node = std::env::var("ACOA_K3S_NODE").unwrap_or_else(|_| {
        panic!("set ACOA_K3S_NODE to the name of a node of the cluster that may run a test pod")
    });
    let image = std::env::var("ACOA_K3S_IMAGE").unwrap_or_else(|_| "busybox:1.36".into());
    let spec = acoa_shared::wire::ContainerSpec {
        name: acoa_shared::wire::name("acoatest.sleeper").unwrap(),
        app: acoa_shared::wire::name("acoatest").unwrap(),
        component: acoa_shared::wire::name("sleeper").unwrap(),
        image: acoa_shared::wire::bounded("image", &image).unwrap(),
        cpu_millis: 50,
        memory_mb: 16,
        env: heapless::Vec::new(),
        health: None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let k = K3sRuntime::new(Some(std::path::Path::new(kubeconfig)), "default", &node)
            .await
            .expect("cluster reachable");
        let _ = k.remove("acoatest.sleeper").await;
        k.create(&spec, 1, &spec_hash(&spec, None))
            .await
            .expect("pod created");
        let mut running = false;
        for _ in 0..120 {
            let list = k.list().await.expect("list");
            if list
                .iter()
                .any(|o| o.name == "acoatest.sleeper" && o.state == RunState::Running)
            {
                running = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
        k.remove("acoatest.sleeper").await.expect("pod removed");
        assert!(running, "the pod did not run within 120 s");
    });
}
