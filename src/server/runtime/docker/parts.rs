//! Containers with only some parts of the fence, for `gpuq bench external` (see `fence::parts`):
//! never a job's, so nothing here is verified.

use super::{container_name, Docker};
use crate::model::JobNetwork;
use crate::server::runtime::fence::{partial_config, FencePart};
use crate::server::runtime::{LaunchRequest, RuntimeError};

impl Docker {
    /// Creates (does not start) the container `gpuq-<job_id>-<attempt>` of `req` with only
    /// `parts` of its fence, nothing checked before or after: what dockerd alone spends on those
    /// options. With [`FencePart::Network`] and an isolated network, gpuq's job network is named
    /// by id, as a job's container names it.
    pub async fn create_parts(
        &self,
        req: &LaunchRequest,
        parts: &[FencePart],
    ) -> Result<String, RuntimeError> {
        let mut body = partial_config(req, parts)?;
        if parts.contains(&FencePart::Network) && req.network == JobNetwork::Isolated {
            let id = self.ensure_job_network().await?;
            if let Some(hc) = body.host_config.as_mut() {
                hc.network_mode = Some(id);
            }
        }
        self.create_named(&container_name(req), &req.image, body)
            .await
    }
}
