use super::*;
use crate::server::gpu::{CardProcess, ReadCard, Reading, SimInventory};

const ID: &str = "3f1c0a9e5b7d2c4e6f8a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e";

fn held(job: Uuid, container: Option<&str>, gpu: Uuid) -> HeldCard {
    HeldCard {
        job_id: job,
        container_id: container.map(str::to_owned),
        gpu_uuid: gpu,
        committed_mib: 1000,
        stopping: false,
        workload: None,
        session: false,
    }
}

#[test]
fn a_process_is_the_job_whose_recorded_container_its_cgroup_names() {
    let root = std::env::temp_dir().join(format!("gpuq-owners-{}", Uuid::new_v4()));
    let other = "b".repeat(64);
    for (pid, cgroup) in [
        (10, format!("0::/system.slice/docker-{ID}.scope\n")),
        (11, format!("0::/docker/{other}\n")),
        (12, "0::/user.slice/session-2.scope\n".to_owned()),
    ] {
        std::fs::create_dir_all(root.join(pid.to_string())).unwrap();
        std::fs::write(root.join(format!("{pid}/cgroup")), cgroup).unwrap();
    }
    let (job, waiting, gpu) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let owners = JobOwners::from_held(
        &[held(job, Some(ID), gpu), held(waiting, None, gpu)],
        root.clone(),
    );
    assert_eq!(owners.job_of(10), Some(job));
    assert_eq!(owners.job_of(11), None, "a container that is no job's here");
    assert_eq!(owners.job_of(12), None, "in no container");
    assert_eq!(owners.job_of(13), None, "gone");
    assert!(owners.holds(job, gpu) && owners.holds(waiting, gpu));
    assert!(!owners.holds(job, Uuid::new_v4()));
    assert_eq!(JobOwners::default().job_of(10), None);
    std::fs::remove_dir_all(&root).unwrap();
}

fn process(gpu: Uuid, pid: u32, mib: Option<u64>) -> CardProcess {
    let bytes = mib.map(|m| m * 1024 * 1024);
    CardProcess {
        gpu,
        pid,
        used_mib: mib.map(|m| m as i64),
        used_bytes: bytes,
        graphics: false,
    }
}

#[test]
fn foreign_memory_leaves_out_what_is_ours_and_is_unknown_when_a_list_was_refused() {
    let sim = SimInventory::from_spec("1x1000:X", "n").unwrap();
    let mut card = sim.read().unwrap().cards.remove(0);
    assert_eq!(card.external_mib(|_| false), None, "simulated: not seen");
    let gpu = card.info.uuid;
    card.processes = vec![
        process(gpu, 1, Some(300)),
        process(gpu, 1, Some(300)),
        process(gpu, 2, Some(200)),
        process(gpu, 3, None),
    ];
    card.processes_known = true;
    // PID 3 withholds its usage: unknown, unless it is ours.
    assert_eq!(card.external_mib(|_| false), None);
    assert_eq!(card.external_mib(|p| p.pid == 3), Some(500));
    assert_eq!(card.external_mib(|p| p.pid != 2), Some(200));
    let reading = Reading {
        cards: vec![ReadCard {
            processes_known: false,
            ..card.clone()
        }],
        skipped: Vec::new(),
    };
    assert_eq!(reading.cards_with(|p| p.pid == 3)[0].external_mib, None);
    assert_eq!(reading.processes().len(), 4);
}

fn sim_source() -> Source {
    Source {
        // Never connected: simulated cards have no processes to put to jobs.
        pool: PgPool::connect_lazy("postgres://nobody@127.0.0.1:1/none").unwrap(),
        inventory: Arc::new(SimInventory::from_spec("2x1000:X", "n").unwrap()),
        node: "n".into(),
        proc_root: "/proc".into(),
    }
}

#[tokio::test]
async fn readings_come_on_the_tick_and_when_asked_and_the_task_ends_with_its_handles() {
    let (observer, cards) = start(sim_source(), Duration::from_secs(3600)).await;
    let (_stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(observer.run(stop));
    let first = cards.latest();
    assert_eq!(first.seq, 1);
    assert_eq!(first.cards().unwrap().len(), 2);
    assert!(first.processes.is_empty() && first.owners_unknown.is_none());
    let fresh = cards.fresh().await.unwrap();
    assert_eq!(fresh.seq, 2);
    assert!(fresh.taken > first.taken);
    assert_eq!(cards.latest().seq, 2, "published");
    assert!(cards.accounting_peaks(vec![1]).await.unwrap().is_empty());
    drop(cards);
    task.await.unwrap();

    // With a short tick, readings come by themselves.
    let cards = spawn(sim_source(), Duration::from_millis(20)).await;
    let mut seen = cards.subscribe();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.borrow_and_update().seq < 4 {
        assert!(Instant::now() < deadline, "no readings on the tick");
        seen.changed().await.unwrap();
    }
}

#[tokio::test]
async fn the_observer_stops_on_the_signal_and_then_answers_nothing() {
    let (observer, cards) = start(sim_source(), Duration::from_secs(3600)).await;
    let (stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(observer.run(stop));
    stop_tx.send(true).unwrap();
    task.await.unwrap();
    let e = cards.fresh().await.unwrap_err();
    assert!(e.to_string().contains("observer has stopped"), "{e}");
    assert_eq!(cards.latest().seq, 1, "the last snapshot stays readable");
}
