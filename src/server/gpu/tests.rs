use super::*;

fn err_of(r: Result<Box<dyn GpuInventory>, GpuError>) -> GpuError {
    match r {
        Err(e) => e,
        Ok(inv) => panic!("expected an error, got a {} inventory", inv.kind()),
    }
}

#[test]
fn mode_from_str() {
    assert_eq!("auto".parse::<GpuMode>().unwrap(), GpuMode::Auto);
    assert_eq!(" NVML ".parse::<GpuMode>().unwrap(), GpuMode::Nvml);
    assert_eq!("Sim".parse::<GpuMode>().unwrap(), GpuMode::Sim);
    let e = "cuda".parse::<GpuMode>().unwrap_err();
    assert!(matches!(e, GpuError::InvalidMode(_)));
    let msg = e.to_string();
    assert!(
        msg.contains("\"cuda\"")
            && msg.contains("auto")
            && msg.contains("nvml")
            && msg.contains("sim")
    );
    for m in [GpuMode::Auto, GpuMode::Nvml, GpuMode::Sim] {
        assert_eq!(m.to_string().parse::<GpuMode>().unwrap(), m);
    }
    assert_eq!(GpuMode::default(), GpuMode::Auto);
}

#[test]
fn sim_without_spec_names_flag() {
    for spec in [None, Some(""), Some("  ")] {
        let e = err_of(from_config(GpuMode::Sim, spec, "n"));
        assert!(matches!(e, GpuError::MissingSimSpec));
        assert!(e.to_string().contains("--sim-gpus"));
    }
}

#[test]
fn sim_with_bad_spec_is_refused() {
    let e = err_of(from_config(GpuMode::Sim, Some("0x1:A"), "n"));
    assert!(matches!(e, GpuError::InvalidSimSpec(_)));
}

#[test]
fn sim_and_auto_with_spec_are_simulated() {
    for mode in [GpuMode::Sim, GpuMode::Auto] {
        let inv = from_config(mode, Some("2x1024:Test GPU"), "n").unwrap();
        assert_eq!(inv.kind(), InventoryKind::Simulated);
        let cards = inv.snapshot(&OurProcesses::default()).unwrap();
        assert_eq!(cards.len(), 2);
        assert!(cards.iter().all(|c| c.simulated));
    }
}

/// Real failure path on driver-less hosts; on a GPU host NVML must work instead.
#[test]
fn nvml_mode_reports_missing_library() {
    match from_config(GpuMode::Nvml, Some("1x1:ignored"), "n") {
        Ok(inv) => {
            assert_eq!(inv.kind(), InventoryKind::Nvml);
            let cards = inv.snapshot(&OurProcesses::default()).unwrap();
            assert!(cards.iter().all(|c| !c.simulated && c.total_mib > 0));
        }
        Err(e) => {
            assert!(
                matches!(e, GpuError::LibraryMissing { .. } | GpuError::Nvml(_)),
                "{e:?}"
            );
            let msg = e.to_string();
            assert!(msg.contains("libnvidia-ml"), "{msg}");
            if matches!(e, GpuError::LibraryMissing { .. }) {
                assert!(msg.contains("--gpu-source sim --sim-gpus"), "{msg}");
            }
        }
    }
}

#[test]
fn auto_without_spec_or_driver_gives_guidance() {
    match from_config(GpuMode::Auto, None, "n") {
        Ok(inv) => assert_eq!(inv.kind(), InventoryKind::Nvml),
        Err(e) => {
            assert!(matches!(e, GpuError::NoGpus(_)), "{e:?}");
            let msg = e.to_string();
            assert!(msg.contains("no GPUs available"), "{msg}");
            assert!(msg.contains("libnvidia-ml"), "{msg}");
            assert!(msg.contains("--sim-gpus"), "{msg}");
        }
    }
}

#[test]
fn inventory_is_object_safe_and_shareable() {
    fn assert_send_sync<T: Send + Sync + ?Sized>() {}
    assert_send_sync::<dyn GpuInventory>();
    assert_send_sync::<NvmlInventory>();
    let ours: OurProcesses = [1u32, 2, 2].into_iter().collect();
    assert_eq!(ours.pids.len(), 2);
}

#[test]
fn a_wrong_nvml_lib_path_is_named_in_the_error() {
    let path = std::path::Path::new("/nonexistent/gpuq-test/libnvidia-ml.so.1");
    for mode in [GpuMode::Nvml, GpuMode::Auto] {
        let e = err_of(from_config_with_lib(mode, None, "n", Some(path)));
        let msg = e.to_string();
        assert!(
            msg.contains("/nonexistent/gpuq-test/libnvidia-ml.so.1"),
            "{msg}"
        );
    }
    let e = err_of(from_config_with_lib(GpuMode::Nvml, None, "n", Some(path)));
    assert!(
        matches!(&e, GpuError::LibraryMissing { path: p, .. } if p.contains("gpuq-test")),
        "{e:?}"
    );
    assert!(e.to_string().contains("--nvml-lib"), "{e}");
}
