use super::*;
use crate::server::gpu::OurProcesses;

const EXAMPLE: &str = "3x24576:NVIDIA GeForce RTX 3090,1x81920:NVIDIA A100 80GB";

fn err(spec: &str) -> String {
    match parse_sim_spec(spec) {
        Err(e) => e.to_string(),
        Ok(cards) => panic!("spec {spec:?} should fail, got {cards:?}"),
    }
}

#[test]
fn parses_example() {
    let cards = parse_sim_spec(EXAMPLE).unwrap();
    assert_eq!(cards.len(), 4);
    for (i, c) in cards.iter().enumerate() {
        assert_eq!(c.index, i as u32);
    }
    assert!(cards[..3]
        .iter()
        .all(|c| c.model == "NVIDIA GeForce RTX 3090" && c.total_mib == 24576));
    assert_eq!(cards[3].model, "NVIDIA A100 80GB");
    assert_eq!(cards[3].total_mib, 81920);
}

#[test]
fn trims_whitespace_and_accepts_no_count() {
    let cards = parse_sim_spec("  2 x 1024 :  Tiny GPU  ,\t4096:Solo:Rev B ").unwrap();
    assert_eq!(cards.len(), 3);
    assert_eq!(cards[0].model, "Tiny GPU");
    assert_eq!(cards[1].total_mib, 1024);
    assert_eq!(cards[2].index, 2);
    assert_eq!(cards[2].model, "Solo:Rev B");
    assert_eq!(cards[2].total_mib, 4096);
    assert_eq!(parse_sim_spec("2X10:A").unwrap().len(), 2);
    assert!(
        err("X2048:A").contains("count must be"),
        "empty count is refused"
    );
}

#[test]
fn limits_are_inclusive() {
    assert_eq!(parse_sim_spec("64x4194304:M").unwrap().len(), 64);
    assert_eq!(
        parse_sim_spec(&format!("1x1:{}", "m".repeat(96)))
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn refusals_name_group_and_problem() {
    assert_eq!(
        err("1x10:A,x:abc"),
        "invalid --sim-gpus spec: group 2 (\"x:abc\"): count must be a whole number from 1 to 64"
    );
    let count = "count must be a whole number from 1 to 64";
    let mib = "memory must be a whole number of MiB from 1 to 4194304";
    for (spec, msg) in [
        ("0x10:A", count),
        ("65x10:A", count),
        ("-1x10:A", count),
        ("+2x10:A", count),
        ("1.5x10:A", count),
        ("99999999999999999999x10:A", count),
        ("1x0:A", mib),
        ("1x4194305:A", mib),
        ("1x:A", mib),
        ("abc:A", mib),
        ("1x10.5:A", mib),
        ("1x10:", "model name must not be empty"),
        ("1x10:   ", "model name must not be empty"),
        ("1x10 A", "missing ':'"),
    ] {
        let e = err(spec);
        assert!(e.contains("group 1 ("), "{spec}: {e}");
        assert!(e.contains(msg), "{spec}: {e}");
    }
    assert!(err(&format!("1x1:{}", "m".repeat(97))).contains("at most 96 characters"));
    assert!(err("1x1:A,").contains("group 2 (\"\"): group is empty"));
    assert!(err("1x1:A,,1x1:B").contains("group 2"));
    assert!(err("1x1:A\u{7}").contains("control characters"));
    assert!(err("").contains("spec is empty"));
    assert!(err("   ").contains("spec is empty"));
}

#[test]
fn uuids_stable_and_distinct() {
    let a = SimInventory::from_spec(EXAMPLE, "node-a").unwrap();
    let a2 = SimInventory::from_spec(EXAMPLE, "node-a").unwrap();
    let b = SimInventory::from_spec(EXAMPLE, "node-b").unwrap();
    let ours = OurProcesses::default();
    let (sa, sa2, sb) = (
        a.snapshot(&ours).unwrap(),
        a2.snapshot(&ours).unwrap(),
        b.snapshot(&ours).unwrap(),
    );
    assert_eq!(sa, sa2);
    for (x, y) in sa.iter().zip(&sb) {
        assert_ne!(x.uuid, y.uuid);
    }
    let unique: std::collections::HashSet<_> = sa.iter().map(|g| g.uuid).collect();
    assert_eq!(unique.len(), 4, "same model, different index must differ");
    assert_eq!(
        sa[0].uuid,
        sim_uuid("node-a", 0, "NVIDIA GeForce RTX 3090", 24576)
    );
    // Pinned value: changing the namespace or text format would orphan DB rows.
    assert_eq!(
        sim_uuid("n", 0, "M", 1),
        uuid::Uuid::new_v5(&SIM_UUID_NAMESPACE, b"n/0/M/1")
    );
    assert_eq!(sa[0].uuid.get_version_num(), 5);
}

#[test]
fn snapshot_marks_cards_simulated_and_unobserved() {
    let inv = SimInventory::from_spec(EXAMPLE, "n").unwrap();
    assert_eq!(inv.kind(), InventoryKind::Simulated);
    for g in inv.snapshot(&OurProcesses::default()).unwrap() {
        assert!(g.simulated);
        assert_eq!(g.used_mib, None);
        assert_eq!(g.external_mib, None);
        assert_eq!(g.utilization_pct, None);
    }
}
