//! Every task file in `examples/tasks/` (and its `failing/` examples) validates, compiles and
//! round-trips.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use ax_scheduler_core::{TaskSpec, UtcMillis};

#[test]
fn example_tasks_validate() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/tasks");
    let mut seen = 0;
    let files = std::fs::read_dir(&dir)
        .expect("examples/tasks exists")
        .chain(std::fs::read_dir(dir.join("failing")).expect("examples/tasks/failing exists"));
    for entry in files {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let id = path.file_stem().unwrap().to_str().unwrap().to_string();
        let bytes = std::fs::read(&path).unwrap();
        let spec = TaskSpec::from_json(&bytes, "default", &id)
            .unwrap_or_else(|e| panic!("{}:\n{e}", path.display()));
        let again = TaskSpec::from_json(&spec.to_json(), "default", &id).unwrap();
        assert_eq!(again, spec, "{} does not round-trip", path.display());
        let compiled = spec.schedule.compile().unwrap();
        let anchor = spec.created_at.unwrap_or(UtcMillis(1_767_225_600_000));
        assert!(
            compiled.first_fire(anchor).is_some(),
            "{} never fires",
            path.display()
        );
        seen += 1;
    }
    assert!(seen >= 6, "expected the example tasks, found {seen}");
}
