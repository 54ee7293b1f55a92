//! A cache hit for a SIF image against one for an OCI image of the same tree:
//! `cargo bench -p gantry-agent --bench image` (root, the test registry of
//! `scripts/test-images.sh`, squashfs-tools). Prints `figure NAME VALUE` lines; nothing here
//! passes or fails.
//!
//! The test busybox image (`docker://`) and a SIF of its root filesystem (`oras://`, pushed
//! here) are pulled once into one cache; then, ROUNDS times each, a new `ImageStore` on that
//! cache (an agent restart, or a tag last resolved more than 5 s ago) prepares the image: the
//! registry is asked for the manifest, and everything else is found on disk. Both include
//! making the registry client. Medians in milliseconds.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use gantry_agent::image::{ImageStore, PullConfig};
use gantry_api::agent::ImageSource;

const ROUNDS: usize = 30;

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

fn src(uri: &str) -> ImageSource {
    serde_json::from_value(serde_json::json!({ "uri": uri })).unwrap()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let env = common::env();
    let dir = common::scratch("bench-image");
    let rootfs = dir.path().join("rootfs");
    // The busybox image's own tree, so both images hold the same files.
    let config = PullConfig {
        insecure_hosts: vec![env.registry.clone()],
        ..Default::default()
    };
    let cache = dir.path().join("cache");
    let oci = format!("docker://{}/library/busybox:1", env.registry);
    let first = ImageStore::new(&cache, config.clone()).unwrap();
    let img = first.prepare(&src(&oci)).await.unwrap();
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(&img.layers[0])
        .arg(&rootfs)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::create_dir_all(rootfs.join(".singularity.d/env")).unwrap();
    std::fs::write(
        rootfs.join(".singularity.d/env/90-environment.sh"),
        "export PATH=/bin:/usr/bin\nexport GREETING=hi\n",
    )
    .unwrap();
    let sif = common::push_sif(&rootfs, &format!("bench/sif-{}", std::process::id())).await;
    first.prepare(&src(&sif)).await.unwrap();

    for (name, uri) in [("oci", &oci), ("sif", &sif)] {
        let mut times = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let store = ImageStore::new(&cache, config.clone()).unwrap();
            let t = Instant::now();
            let img = store.prepare(&src(uri)).await.unwrap();
            times.push(t.elapsed());
            assert_eq!(store.fetch_count(), 0, "a cache hit");
            assert!(img.layers[0].join("bin/busybox").is_file());
        }
        println!("figure prepare.hit.{name}_ms {:.2}", median(times));
    }
}
