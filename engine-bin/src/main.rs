//! The `ax` binary. Filled by the engine issue.

fn main() {
    eprintln!("ax: the engine is not built yet");
    std::process::exit(2);
}
