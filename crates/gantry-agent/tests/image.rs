//! Image pulls against a real local registry and real OCI layouts (see `common`).

mod common;

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use gantry_agent::image::{ImageError, ImageStore, OciError, PreparedImage, PullConfig};
use gantry_api::agent::{ImageSource, RegistryCredential};

/// Built from JSON so the test does not depend on every field of the wire type.
fn src_with(uri: &str, credential: Option<RegistryCredential>) -> ImageSource {
    serde_json::from_value(serde_json::json!({ "uri": uri, "credential": credential })).unwrap()
}

fn src(uri: &str) -> ImageSource {
    src_with(uri, None)
}

fn plain_http() -> PullConfig {
    PullConfig {
        insecure_hosts: vec![
            common::env().registry.clone(),
            common::env().auth_registry.clone(),
        ],
        oci_roots: vec![layouts_root()],
        ..Default::default()
    }
}

/// Where `scripts/test-images.sh` makes its layouts: the root these tests allow.
fn layouts_root() -> PathBuf {
    common::env().oci_busybox.parent().unwrap().to_path_buf()
}

/// A node that reads layouts only from `roots`.
fn layouts_in(roots: Vec<PathBuf>) -> PullConfig {
    PullConfig {
        oci_roots: roots,
        ..Default::default()
    }
}

fn store(dir: &Path, config: PullConfig) -> ImageStore {
    ImageStore::new(dir.join("cache"), config).unwrap()
}

fn assert_busybox(img: &PreparedImage) {
    assert_eq!(img.layers.len(), 1);
    assert!(img.layers[0].join("bin/busybox").is_file());
    assert_eq!(img.config.cmd, vec!["/bin/sh"]);
    assert!(img.config.env.iter().any(|e| e.starts_with("PATH=")));
}

#[tokio::test]
async fn pulls_over_plain_http_when_allowed() {
    let env = common::env();
    let dir = common::scratch("pull");
    let s = store(dir.path(), plain_http());
    let img = s
        .prepare(&src(&format!(
            "docker://{}/library/busybox:1",
            env.registry
        )))
        .await
        .unwrap();
    assert_eq!(img.manifest_digest, env.busybox_digest);
    assert_busybox(&img);
    assert!(s.cache_bytes() > 1_000_000, "{}", s.cache_bytes());
}

#[tokio::test]
async fn https_is_the_default() {
    let env = common::env();
    let dir = common::scratch("https");
    let s = store(dir.path(), PullConfig::default());
    let err = s
        .prepare(&src(&format!(
            "docker://{}/library/busybox:1",
            env.registry
        )))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ImageError::Oci(OciError::Registry { .. })),
        "{err}"
    );
    // TLS to a plain-HTTP registry: the one case for the insecure-registries hint.
    assert!(err.to_string().contains("insecure registries"), "{err}");
}

#[tokio::test]
async fn mirror_serves_docker_hub_names() {
    let env = common::env();
    let dir = common::scratch("mirror");
    let mut config = PullConfig::default();
    config
        .mirrors
        .insert("docker.io".into(), format!("http://{}", env.registry));
    let s = store(dir.path(), config);
    let img = s.prepare(&src("docker://busybox:1")).await.unwrap();
    assert_eq!(img.reference, "docker.io/library/busybox:1");
    assert_eq!(img.manifest_digest, env.busybox_digest);
    assert_busybox(&img);
}

#[tokio::test]
async fn basic_auth_credentials() {
    let env = common::env();
    let dir = common::scratch("auth");
    let s = store(dir.path(), plain_http());
    let uri = format!("docker://{}/private/busybox:1", env.auth_registry);

    let err = s.prepare(&src(&uri)).await.unwrap_err();
    assert!(
        matches!(err, ImageError::Oci(OciError::Unauthorized { .. })),
        "{err}"
    );

    let wrong = src_with(
        &uri,
        Some(RegistryCredential::Basic {
            username: env.auth_user.clone(),
            password: "wrong".into(),
        }),
    );
    let err = s.prepare(&wrong).await.unwrap_err();
    assert!(
        matches!(err, ImageError::Oci(OciError::Unauthorized { .. })),
        "{err}"
    );

    let right = src_with(
        &uri,
        Some(RegistryCredential::Basic {
            username: env.auth_user.clone(),
            password: env.auth_password.clone(),
        }),
    );
    let img = s.prepare(&right).await.unwrap();
    assert_eq!(img.manifest_digest, env.busybox_digest);

    // The resolution just made is reused only by callers with that same credential: the image
    // is in the node's cache now, and it must still not reach anyone the registry refuses.
    let err = s.prepare(&src(&uri)).await.unwrap_err();
    assert!(
        matches!(err, ImageError::Oci(OciError::Unauthorized { .. })),
        "{err}"
    );
    let err = s.prepare(&wrong).await.unwrap_err();
    assert!(
        matches!(err, ImageError::Oci(OciError::Unauthorized { .. })),
        "{err}"
    );
    let again = s.prepare(&right).await.unwrap();
    assert_eq!(again, img);
}

#[tokio::test]
async fn missing_image_is_not_found() {
    let env = common::env();
    let dir = common::scratch("missing");
    let s = store(dir.path(), plain_http());
    let err = s
        .prepare(&src(&format!("docker://{}/library/nope:1", env.registry)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ImageError::Oci(OciError::NotFound { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("check the tag"), "{err}");
    assert!(!err.to_string().contains("insecure"), "{err}");
}

#[tokio::test]
async fn blobs_are_fetched_once() {
    let env = common::env();
    let dir = common::scratch("once");
    let s = store(dir.path(), plain_http());
    let whiteout = src(&format!("docker://{}/library/whiteout:1", env.registry));
    // Two pulls of one image at once: the per-digest lock makes the second wait, not refetch.
    let (a, b) = tokio::join!(s.prepare(&whiteout), s.prepare(&whiteout));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b);
    assert_eq!(a.layers.len(), 3);
    assert_eq!(s.fetch_count(), 4, "3 layers and a config");
    let ino = fs::metadata(&a.layers[0]).unwrap().ino();

    // busybox shares its only layer with whiteout: only its config is new.
    let bb = s
        .prepare(&src(&format!(
            "docker://{}/library/busybox:1",
            env.registry
        )))
        .await
        .unwrap();
    assert_eq!(bb.layers[0], a.layers[0]);
    assert_eq!(s.fetch_count(), 5);
    s.prepare(&whiteout).await.unwrap();
    assert_eq!(s.fetch_count(), 5);
    assert_eq!(
        fs::metadata(&a.layers[0]).unwrap().ino(),
        ino,
        "not unpacked again"
    );

    // A new store on the same cache (an agent restart) finds everything on disk.
    let again = store(dir.path(), plain_http());
    again.prepare(&whiteout).await.unwrap();
    assert_eq!(again.fetch_count(), 0);
}

#[tokio::test]
async fn zstd_layers() {
    let env = common::env();
    let dir = common::scratch("zstd");
    let s = store(dir.path(), plain_http());
    let reg = s
        .prepare(&src(&format!(
            "docker://{}/library/busybox:1-zstd",
            env.registry
        )))
        .await
        .unwrap();
    assert_busybox(&reg);
    let layout = s
        .prepare(&src(&format!("oci://{}:1", env.oci_busybox_zstd.display())))
        .await
        .unwrap();
    assert_eq!(layout.manifest_digest, reg.manifest_digest);
    assert_eq!(
        fs::read(reg.layers[0].join("bin/busybox")).unwrap(),
        fs::read("/usr/bin/busybox").unwrap()
    );
}

#[tokio::test]
async fn oci_layouts() {
    let env = common::env();
    let dir = common::scratch("layout");
    let s = store(dir.path(), layouts_in(vec![layouts_root()]));
    let tagged = s
        .prepare(&src(&format!("oci://{}:1", env.oci_busybox.display())))
        .await
        .unwrap();
    assert_eq!(tagged.manifest_digest, env.busybox_digest);
    assert_busybox(&tagged);
    // A layout holding a single image needs no tag.
    let untagged = s
        .prepare(&src(&format!("oci://{}", env.oci_busybox.display())))
        .await
        .unwrap();
    assert_eq!(untagged.manifest_digest, env.busybox_digest);
    let err = s
        .prepare(&src(&format!("oci://{}:nope", env.oci_busybox.display())))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("it has: 1"), "{err}");
    assert_eq!(s.fetch_count(), 0, "layouts are not registry fetches");
}

#[tokio::test]
async fn index_resolves_to_linux_amd64() {
    let env = common::env();
    let dir = common::scratch("index");
    let s = store(dir.path(), plain_http());
    let reg = s
        .prepare(&src(&format!("docker://{}/library/multi:1", env.registry)))
        .await
        .unwrap();
    assert_eq!(reg.manifest_digest, env.busybox_digest);
    assert_busybox(&reg);
    let layout = s
        .prepare(&src(&format!("oci://{}:1", env.oci_multi.display())))
        .await
        .unwrap();
    assert_eq!(layout.manifest_digest, env.busybox_digest);

    // The index's other entry, asked for by digest, is refused for its platform.
    let index = std::fs::read_to_string(env.oci_multi.join("index.json")).unwrap();
    let index: serde_json::Value = serde_json::from_str(&index).unwrap();
    let index_digest = index["manifests"][0]["digest"].as_str().unwrap();
    let blob = env.oci_multi.join("blobs/sha256").join(&index_digest[7..]);
    let inner: serde_json::Value = serde_json::from_slice(&fs::read(blob).unwrap()).unwrap();
    let arm = inner["manifests"][0]["digest"].as_str().unwrap();
    let err = s
        .prepare(&src(&format!(
            "docker://{}/library/multi@{arm}",
            env.registry
        )))
        .await
        .unwrap_err();
    assert!(matches!(err, ImageError::WrongPlatform { .. }), "{err}");
}

/// Mounts the image's layers (read-only overlay, no upper) the way a container sees them.
struct Overlay(PathBuf);

impl Overlay {
    fn mount(layers: &[PathBuf], target: &Path) -> Overlay {
        fs::create_dir_all(target).unwrap();
        let lower: Vec<String> = layers
            .iter()
            .rev()
            .map(|p| p.display().to_string())
            .collect();
        let data = CString::new(format!("lowerdir={}", lower.join(":"))).unwrap();
        let t = CString::new(target.as_os_str().as_bytes()).unwrap();
        let fstype = CString::new("overlay").unwrap();
        // SAFETY: valid NUL-terminated strings.
        let rc = unsafe {
            libc::mount(
                fstype.as_ptr(),
                t.as_ptr(),
                fstype.as_ptr(),
                libc::MS_RDONLY,
                data.as_ptr().cast(),
            )
        };
        assert_eq!(rc, 0, "mount: {}", std::io::Error::last_os_error());
        Overlay(target.to_path_buf())
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let t = CString::new(self.0.as_os_str().as_bytes()).unwrap();
        // SAFETY: valid NUL-terminated path.
        unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    }
}

#[tokio::test]
async fn whiteouts_hide_files_and_metadata_is_kept() {
    let env = common::env();
    let dir = common::scratch("whiteout");
    let s = store(dir.path(), plain_http());
    let img = s
        .prepare(&src(&format!(
            "docker://{}/library/whiteout:1",
            env.registry
        )))
        .await
        .unwrap();
    assert_eq!(img.layers.len(), 3);
    let root = dir.path().join("merged");
    let _m = Overlay::mount(&img.layers, &root);
    let data = root.join("data");

    assert!(root.join("bin/busybox").is_file());
    assert_eq!(fs::read_to_string(data.join("keep")).unwrap(), "keep\n");
    assert!(!data.join("gone").exists(), "whiteout hides the file");
    assert!(!data.join("opq/old1").exists() && !data.join("opq/old2").exists());
    assert_eq!(fs::read_to_string(data.join("opq/new")).unwrap(), "new\n");
    let names: Vec<_> = fs::read_dir(data.join("opq"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        names,
        vec!["new"],
        "opaque directory shows only its own layer"
    );

    let keep = fs::metadata(data.join("keep")).unwrap();
    assert_eq!(
        fs::metadata(data.join("hard")).unwrap().ino(),
        keep.ino(),
        "hard link kept"
    );
    assert_eq!(fs::read_link(data.join("link")).unwrap(), Path::new("keep"));
    let owned = fs::metadata(data.join("owned")).unwrap();
    assert_eq!((owned.uid(), owned.gid()), (1000, 1000));
    assert_eq!(owned.permissions().mode() & 0o7777, 0o640);
    let suid = fs::metadata(data.join("suid")).unwrap();
    assert_eq!(suid.permissions().mode() & 0o7777, 0o4755);
    let tmp = fs::metadata(root.join("tmp")).unwrap();
    assert_eq!(tmp.permissions().mode() & 0o7777, 0o1777);
}

/// The message a user sees for a layout the node will not read, whatever the reason.
fn refusal(path: &Path) -> String {
    format!(
        "OCI layout {} is not available on this node: layouts are read only from the \
         directories an administrator allows (--oci-root), and only when they can be read there",
        path.display()
    )
}

#[tokio::test]
async fn layouts_are_read_only_beneath_an_allowed_root_and_refusals_look_alike() {
    let env = common::env();
    let dir = common::scratch("oci-roots");
    let root = dir.path().join("allowed");
    let outside = dir.path().join("outside");
    fs::create_dir_all(&root).unwrap();
    fs::create_dir_all(&outside).unwrap();
    // A real layout inside the root (the legitimate use), and one outside it.
    let copy = |from: &Path, to: &Path| {
        let st = std::process::Command::new("cp")
            .arg("-a")
            .arg(from)
            .arg(to)
            .status()
            .unwrap();
        assert!(st.success());
    };
    copy(&env.oci_busybox, &root.join("busybox"));
    copy(&env.oci_busybox, &outside.join("busybox"));
    // Symlinks a user might hope to be followed: a layout that is a link out of the root, a
    // directory on the way that is one, and a layout whose index.json is one.
    std::os::unix::fs::symlink(outside.join("busybox"), root.join("linked")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("via")).unwrap();
    fs::create_dir_all(root.join("sneaky/blobs")).unwrap();
    std::os::unix::fs::symlink(
        outside.join("busybox/index.json"),
        root.join("sneaky/index.json"),
    )
    .unwrap();
    // Not a layout at all; and one whose index.json is a FIFO, which must not hang the node.
    fs::create_dir_all(root.join("empty")).unwrap();
    fs::create_dir_all(root.join("fifo")).unwrap();
    let fifo = CString::new(root.join("fifo/index.json").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    // A file the node could read but that is no directory.
    fs::write(root.join("file"), "x").unwrap();
    fs::set_permissions(root.join("file"), fs::Permissions::from_mode(0o600)).unwrap();

    let s = store(dir.path(), layouts_in(vec![root.clone()]));
    let ok = s
        .prepare(&src(&format!("oci://{}/busybox:1", root.display())))
        .await
        .unwrap();
    assert_eq!(ok.manifest_digest, env.busybox_digest);
    assert_busybox(&ok);

    let refused = [
        outside.join("busybox"),         // outside every root
        PathBuf::from("/etc"),           // the host's own files
        root.join("../outside/busybox"), // `..` out of the root
        root.join("linked"),             // a symlink out of the root
        root.join("via/busybox"),        // a symlinked directory on the way
        root.join("sneaky"),             // index.json a symlink
        root.join("missing"),            // does not exist
        root.join("empty"),              // no index.json
        root.join("fifo"),               // index.json a FIFO
        root.join("file"),               // not a directory
    ];
    for path in &refused {
        for uri in [
            format!("oci://{}", path.display()),
            format!("oci://{}:1", path.display()),
        ] {
            let err = s.prepare(&src(&uri)).await.unwrap_err();
            let want = refusal(path);
            assert_eq!(err.to_string(), want, "{uri}");
            assert!(matches!(err, ImageError::LayoutUnavailable { .. }), "{uri}");
        }
    }
    // With no root configured, no layout is read at all, not even a real one.
    let none = store(&dir.path().join("none"), PullConfig::default());
    let err = none
        .prepare(&src(&format!("oci://{}/busybox", root.display())))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), refusal(&root.join("busybox")));
    // Digest resolution (what the server does for a build's base) keeps to the same rule.
    let config = layouts_in(vec![root.clone()]);
    assert_eq!(
        gantry_agent::image::resolve_digest(
            &src(&format!("oci://{}/busybox:1", root.display())),
            &config
        )
        .await
        .unwrap(),
        env.busybox_digest
    );
    let err = gantry_agent::image::resolve_digest(
        &src(&format!("oci://{}", root.join("linked").display())),
        &config,
    )
    .await
    .unwrap_err();
    assert_eq!(err.to_string(), refusal(&root.join("linked")));
    assert_eq!(s.fetch_count(), 0);
}

#[test]
fn oci_roots_must_be_absolute() {
    for bad in ["relative/dir", "/srv/../etc"] {
        let dir = common::scratch("bad-root");
        let r = ImageStore::new(dir.path().join("cache"), layouts_in(vec![bad.into()]));
        assert!(
            matches!(r, Err(ImageError::Oci(OciError::InvalidConfig(_)))),
            "{bad} was taken as a root"
        );
    }
}

#[tokio::test]
async fn sif_images_are_fetched_and_unpacked_once() {
    let dir = common::scratch("sif");
    let rootfs = dir.path().join("rootfs");
    fs::create_dir_all(rootfs.join(".singularity.d/env")).unwrap();
    fs::write(rootfs.join("hello.txt"), "hello\n").unwrap();
    fs::write(
        rootfs.join(".singularity.d/env/90-environment.sh"),
        "export GREETING=hi\n",
    )
    .unwrap();
    fs::write(
        rootfs.join(".singularity.d/runscript"),
        "#!/bin/sh\necho run\n",
    )
    .unwrap();
    let uri = common::push_sif(&rootfs, &format!("agent-test/sif-{}", std::process::id())).await;

    let s = store(dir.path(), plain_http());
    let img = s.prepare(&src(&uri)).await.unwrap();
    assert_eq!(img.layers.len(), 1);
    assert_eq!(
        fs::read_to_string(img.layers[0].join("hello.txt")).unwrap(),
        "hello\n"
    );
    assert!(
        img.config.env.contains(&"GREETING=hi".to_string()),
        "{:?}",
        img.config.env
    );
    assert_eq!(img.config.cmd, ["/.singularity.d/runscript"]);
    assert_eq!(
        s.fetch_count(),
        1,
        "the SIF blob alone (its config is not needed)"
    );
    let ino = fs::metadata(&img.layers[0]).unwrap().ino();

    // A new store on the same cache (an agent restart): nothing fetched, nothing unpacked.
    let again = store(dir.path(), plain_http());
    let img2 = again.prepare(&src(&uri)).await.unwrap();
    assert_eq!(again.fetch_count(), 0);
    assert_eq!(img2, img);
    assert_eq!(fs::metadata(&img2.layers[0]).unwrap().ino(), ino);

    // The same reference as docker:// is not an OCI image: its one layer is no tar, and the
    // SIF's cached tree or answer is not handed out for it.
    let docker = again
        .prepare(&src(&uri.replacen("oras://", "docker://", 1)))
        .await;
    assert!(docker.is_err(), "{docker:?}");
    // An OCI image through oras:// is refused with what it is.
    let bb = again
        .prepare(&src(&format!(
            "oras://{}/library/busybox:1",
            common::env().registry
        )))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        bb.contains("application/vnd.sylabs.sif.layer.v1.sif"),
        "{bb}"
    );
}
