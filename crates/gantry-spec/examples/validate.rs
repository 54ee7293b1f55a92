//! `cargo run -p gantry-spec --example validate -- FILE...`: prints each
//! file's problems as `FILE:LINE:COL: message`, or a one-line summary.
//! Exits 1 when any file has a problem.

fn main() {
    let mut failed = false;
    for arg in std::env::args().skip(1) {
        match gantry_spec::parse_file(std::path::Path::new(&arg)) {
            Ok(wf) => println!(
                "{arg}: ok: {} jobs, {} services, {} volumes; order: {}",
                wf.jobs.len(),
                wf.services.len(),
                wf.volumes.len(),
                wf.topo_order().join(" ")
            ),
            Err(diags) => {
                failed = true;
                print!("{}", gantry_spec::render_all(&arg, &diags));
            }
        }
    }
    std::process::exit(i32::from(failed));
}
