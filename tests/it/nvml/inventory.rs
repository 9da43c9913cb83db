//! The inventory as NVML reports it, read in-process from each test's own copy of the fake.

use super::{two_cards, A, A100, B, C, L4};
use crate::support::nvml::FakeNvml;
use gpuq::server::gpu::{self, GpuError, GpuInventory, InventoryKind, NvmlInventory, OurProcesses};

fn ours(pids: &[u32]) -> OurProcesses {
    pids.iter().copied().collect()
}

fn snapshot(inv: &NvmlInventory, our: &[u32]) -> Vec<gpu::GpuInfo> {
    inv.snapshot(&ours(our)).unwrap()
}

#[test]
fn the_inventory_reports_the_cards_as_the_driver_does() {
    let fake = FakeNvml::new(&two_cards());
    let inv = fake.inventory();
    assert_eq!(inv.kind(), InventoryKind::Nvml);
    let cards = snapshot(&inv, &[]);
    assert_eq!(cards.len(), 2, "{cards:?}");
    let (a, b) = (&cards[0], &cards[1]);
    assert_eq!((a.uuid.to_string().as_str(), a.index), (A, 0));
    assert_eq!(
        (a.model.as_str(), a.total_mib, a.used_mib),
        (A100, 81920, Some(1024))
    );
    assert_eq!((a.utilization_pct, a.external_mib), (Some(37), Some(0)));
    assert!(!a.simulated);
    assert_eq!((b.uuid.to_string().as_str(), b.index), (B, 1));
    assert_eq!(
        (b.model.as_str(), b.total_mib, b.used_mib),
        (L4, 23034, Some(0))
    );

    // The state is read again on every call: a rewrite is seen by the same loaded library.
    fake.set(&format!(
        "gpu GPU-{B} \"{L4}\" total_mib=23034 used_mib=4000 util=90\n"
    ));
    let cards = snapshot(&inv, &[]);
    assert_eq!(cards.len(), 1);
    assert_eq!((cards[0].uuid.to_string().as_str(), cards[0].index), (B, 0));
    assert_eq!(
        (cards[0].used_mib, cards[0].utilization_pct),
        (Some(4000), Some(90))
    );
}

#[test]
fn mig_cards_are_skipped_and_shown_as_such() {
    let fake = FakeNvml::new(&format!(
        "gpu GPU-{A} \"{A100}\" total_mib=81920 mig=1\n\
         gpu MIG-{B} \"{A100} MIG 3g.40gb\" total_mib=40192\n\
         gpu GPU-{C} \"{L4}\" total_mib=23034 mig=0 mig_pending=1\n\
         withhold 2 mig\n"
    ));
    let inv = fake.inventory();
    let cards = snapshot(&inv, &[]);
    assert_eq!(cards.len(), 1, "only the whole card is offered: {cards:?}");
    assert_eq!(cards[0].uuid.to_string(), C);
    let skipped = inv.skipped();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert_eq!(
        (skipped[0].index, skipped[0].id.as_str()),
        (0, &*format!("GPU-{A}"))
    );
    assert_eq!(skipped[0].model.as_deref(), Some(A100));
    assert!(
        skipped[0].reason.contains("MIG mode enabled"),
        "{:?}",
        skipped[0]
    );
    assert_eq!(skipped[1].id, format!("MIG-{B}"));
    assert!(skipped[1].reason.contains("MIG device"), "{:?}", skipped[1]);

    // MIG turned off: the card is offered again and no longer listed as skipped.
    fake.set(&format!("gpu GPU-{A} \"{A100}\" total_mib=81920 mig=0\n"));
    assert_eq!(snapshot(&inv, &[]).len(), 1);
    assert!(inv.skipped().is_empty());
    // A simulated inventory skips nothing.
    let sim = gpu::from_config(gpu::GpuMode::Sim, Some("1x1024:X"), "n").unwrap();
    assert!(sim.skipped().is_empty());
}

#[test]
fn withheld_fields_are_unknown_never_zero() {
    let fake = FakeNvml::new(&format!(
        "{}gpu GPU-{C} \"{L4}\" total_mib=23034 used_mib=10\n\
         withhold 0 utilization\n\
         withhold 1 process_memory\n\
         withhold 1 name\n\
         withhold 2 memory\n\
         proc 0 100 300 compute\n\
         proc 1 200 500 compute\n\
         proc 1 201 600 graphics\n",
        two_cards()
    ));
    let inv = fake.inventory();
    let cards = snapshot(&inv, &[]);
    assert_eq!(
        cards.len(),
        2,
        "a card without its memory size is no use: {cards:?}"
    );
    assert_eq!(
        cards[0].utilization_pct, None,
        "not supported is unknown, not 0 %"
    );
    assert_eq!(cards[0].external_mib, Some(300));
    assert_eq!(cards[1].utilization_pct, Some(0), "a real 0 % stays 0 %");
    assert_eq!(
        cards[1].external_mib, None,
        "a foreign process of unknown size"
    );
    assert_eq!(cards[1].model, "unknown");
    // Withheld memory of gpuq's own processes does not matter: they are counted by reservation.
    assert_eq!(snapshot(&inv, &[200, 201])[1].external_mib, Some(0));
    let procs = inv.processes().unwrap();
    let card_b: Vec<_> = procs.iter().filter(|p| p.gpu.to_string() == B).collect();
    assert_eq!(card_b.len(), 2);
    assert!(card_b.iter().all(|p| p.used_mib.is_none()), "{card_b:?}");

    // A process list NVML refuses makes the foreign total unknown too.
    fake.set(&format!("{}withhold 0 processes\n", two_cards()));
    assert_eq!(snapshot(&inv, &[])[0].external_mib, None);
}

#[test]
fn per_process_memory_separates_foreign_processes_from_gpuqs_own() {
    let fake = FakeNvml::new(&format!(
        "{}proc 0 100 2000 compute\n\
         proc 0 200 300 compute\n\
         proc 0 200 300 graphics\n\
         proc 0 300 50 graphics\n\
         proc 1 100 700 compute\n",
        two_cards()
    ));
    let inv = fake.inventory();
    let foreign_only = snapshot(&inv, &[100]);
    assert_eq!(
        foreign_only[0].external_mib,
        Some(350),
        "200 (in both lists, once) + 300; 100 is gpuq's"
    );
    assert_eq!(foreign_only[1].external_mib, Some(0));
    let everything_foreign = snapshot(&inv, &[]);
    assert_eq!(everything_foreign[0].external_mib, Some(2350));
    assert_eq!(everything_foreign[1].external_mib, Some(700));

    let procs = inv.processes().unwrap();
    let listed: Vec<(String, u32, Option<i64>, bool)> = procs
        .iter()
        .map(|p| (p.gpu.to_string(), p.pid, p.used_mib, p.graphics))
        .collect();
    assert_eq!(
        listed,
        vec![
            (A.into(), 100, Some(2000), false),
            (A.into(), 200, Some(300), false),
            (A.into(), 200, Some(300), true),
            (A.into(), 300, Some(50), true),
            (B.into(), 100, Some(700), false),
        ]
    );
}

#[test]
fn accounting_gives_each_pids_peak_after_it_exited() {
    let fake = FakeNvml::new(&format!(
        "{}gpu GPU-{C} \"{L4}\" total_mib=23034 accounting=0\n\
         acct 0 4242 7000\n\
         acct 0 4243 100 running\n\
         acct 0 4244 na\n\
         acct 0 5000 9999\n\
         acct 1 4242 1200 exited\n\
         acct 2 4242 3000\n",
        two_cards()
    ));
    let inv = fake.inventory();
    let mut peaks = inv.accounting_peaks(&[4242, 4243, 4244, 6000]).unwrap();
    peaks.sort_by_key(|p| (p.gpu.to_string(), p.pid));
    let got: Vec<(String, u32, Option<i64>, bool)> = peaks
        .iter()
        .map(|p| (p.gpu.to_string(), p.pid, p.peak_mib, p.running))
        .collect();
    assert_eq!(
        got,
        vec![
            (A.into(), 4242, Some(7000), false),
            (A.into(), 4243, Some(100), true),
            (A.into(), 4244, None, false),
            (B.into(), 4242, Some(1200), false),
        ],
        "card C has accounting off: its record is not read; PID 5000 was not asked for"
    );
    // The peak stays readable when the process no longer runs on the card.
    assert!(inv.processes().unwrap().is_empty());
    fake.set(&format!(
        "{}withhold 0 accounting\nacct 1 4242 1200\n",
        two_cards()
    ));
    let peaks = inv.accounting_peaks(&[4242]).unwrap();
    assert_eq!(peaks.len(), 1, "card A's accounting is withheld: {peaks:?}");
    assert_eq!(peaks[0].gpu.to_string(), B);
}

#[test]
fn any_call_fails_on_demand() {
    let fake = FakeNvml::new(&format!(
        "{}fail nvmlDeviceGetUtilizationRates GPU_IS_LOST gpu=1\n\
         fail nvmlDeviceGetComputeRunningProcesses_v3 NVML_ERROR_NO_PERMISSION gpu=0\n",
        two_cards()
    ));
    let inv = fake.inventory();
    let cards = snapshot(&inv, &[]);
    assert_eq!(cards[0].utilization_pct, Some(37));
    assert_eq!(cards[0].external_mib, None, "its process list was refused");
    assert_eq!(cards[1].utilization_pct, None);
    assert_eq!(cards[1].external_mib, Some(0));

    fake.set(&format!(
        "{}fail nvmlDeviceGetCount_v2 UNKNOWN\n",
        two_cards()
    ));
    let e = inv.snapshot(&ours(&[])).unwrap_err();
    assert!(matches!(e, GpuError::Nvml(_)), "{e:?}");
    assert!(e.to_string().contains("cannot count devices"), "{e}");

    fake.set(&format!("{}fail nvmlInit_v2 NO_PERMISSION\n", two_cards()));
    let e = NvmlInventory::new(Some(fake.lib())).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(&fake.lib().display().to_string()),
        "names the library: {msg}"
    );

    // A malformed state file is an error, not an empty machine.
    fake.set(&format!("{}gpu GPU-{C} \"{L4}\" total_mb=1\n", two_cards()));
    assert!(inv.snapshot(&ours(&[])).is_err());
    assert!(inv.processes().is_err());
}
