//! Every NVML path, through the fake `libnvidia-ml.so.1` (`tests/fixtures/fake-nvml/`): the
//! inventory, MIG cards, withheld fields, per-process memory, accounting and failures on demand
//! (`inventory`); the driver vanishing mid-run and `gpuq serve --gpu-source nvml` end to end
//! (`serve`); a job's container fenced to its cards by UUID (`fence`); the card observer feeding
//! the inventory, the usage samples and VRAM policing from one reading (`observer`).

mod fence;
mod inventory;
mod observer;
mod serve;

const A: &str = "1f1f7a0e-3c5b-2d6c-9c9e-0a3b1c2d3e4f";
const B: &str = "2b7c2c1e-52f4-4c3e-8a43-1d9e7f0a2b11";
const C: &str = "3d3e9b40-7a21-4f6a-b2c8-93e1f0d4a567";
const A100: &str = "NVIDIA A100-SXM4-80GB";
const L4: &str = "NVIDIA L4";

/// An A100 (1024 MiB used, 37 % busy) and an idle L4.
fn two_cards() -> String {
    format!(
        "# two cards\n\
         gpu GPU-{A} \"{A100}\" total_mib=81920 used_mib=1024 util=37\n\
         gpu GPU-{B} \"{L4}\" total_mib=23034 used_mib=0 util=0\n"
    )
}
