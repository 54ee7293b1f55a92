//! A real S3 API server for data transfers: moto's `moto_server` (installed in the test venv
//! by `scripts/install-deps.sh`) on a free port, driven from the test with boto3 (which moto
//! brings), the way a user checks a bucket.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct S3 {
    pub port: u16,
    child: Child,
    /// The keys boto3 signs with: any, unless the server checks them ([`S3::authenticated`]).
    keys: (String, String),
}

/// The venv's python (`GANTRY_MCP_VENV`, as install-deps.sh names it).
fn venv() -> String {
    std::env::var("GANTRY_MCP_VENV").unwrap_or_else(|_| "/opt/gantry-venv".into())
}

impl S3 {
    pub fn start() -> S3 {
        Self::start_with(None)
    }

    /// A server that checks signatures: moto lets the first three requests through unsigned
    /// (`INITIAL_NO_AUTH_ACTION_COUNT`), which make an IAM user, its access key and a policy
    /// allowing everything; from then on only that key's requests are served. Returns the key.
    pub fn authenticated() -> (S3, String, String) {
        let mut s3 = Self::start_with(Some(3));
        let out = s3.py(
            "import json\n\
             iam = boto3.client('iam', endpoint_url=s3.meta.endpoint_url, region_name='us-east-1', aws_access_key_id='x', aws_secret_access_key='x')\n\
             iam.create_user(UserName='gantry')\n\
             k = iam.create_access_key(UserName='gantry')['AccessKey']\n\
             iam.put_user_policy(UserName='gantry', PolicyName='all', PolicyDocument=json.dumps({'Version': '2012-10-17', 'Statement': [{'Effect': 'Allow', 'Action': '*', 'Resource': '*'}]}))\n\
             print(k['AccessKeyId'], k['SecretAccessKey'])",
        );
        let mut it = out.split_whitespace();
        let (id, secret) = (
            it.next().unwrap().to_string(),
            it.next().unwrap().to_string(),
        );
        s3.keys = (id.clone(), secret.clone());
        (s3, id, secret)
    }

    fn start_with(no_auth_count: Option<u32>) -> S3 {
        let port = super::free_port();
        let mut cmd = Command::new(format!("{}/bin/moto_server", venv()));
        if let Some(n) = no_auth_count {
            cmd.env("INITIAL_NO_AUTH_ACTION_COUNT", n.to_string());
        }
        let child = cmd
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server (scripts/install-deps.sh installs it)");
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto_server did not listen");
            std::thread::sleep(Duration::from_millis(100));
        }
        S3 {
            port,
            child,
            keys: ("test".into(), "test".into()),
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// An `s3` secret's JSON for this server.
    pub fn secret_json(&self, key_id: &str, secret: &str) -> String {
        format!(
            r#"{{"accessKeyId":"{key_id}","secretAccessKey":"{secret}","region":"us-east-1","endpoint":"{}"}}"#,
            self.endpoint()
        )
    }

    /// Runs python with `s3`, a boto3 client of this server, defined; returns its stdout.
    pub fn py(&self, code: &str) -> String {
        let prog = format!(
            "import boto3, sys\ns3 = boto3.client('s3', endpoint_url='{}', region_name='us-east-1', aws_access_key_id='{}', aws_secret_access_key='{}')\n{code}",
            self.endpoint(),
            self.keys.0,
            self.keys.1
        );
        let out = Command::new(format!("{}/bin/python", venv()))
            .args(["-c", &prog])
            .output()
            .expect("python");
        assert!(
            out.status.success(),
            "{code}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn put(&self, bucket: &str, key: &str, content: &str) {
        self.py(&format!(
            "try:\n  s3.create_bucket(Bucket='{bucket}')\nexcept Exception:\n  pass\ns3.put_object(Bucket='{bucket}', Key='{key}', Body={content:?}.encode())"
        ));
    }

    /// The object's content, or None when there is none.
    pub fn get(&self, bucket: &str, key: &str) -> Option<String> {
        let out = self.py(&format!(
            "try:\n  sys.stdout.write('+' + s3.get_object(Bucket='{bucket}', Key='{key}')['Body'].read().decode())\nexcept s3.exceptions.NoSuchKey:\n  sys.stdout.write('-')"
        ));
        out.strip_prefix('+').map(str::to_string)
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
