//! What the node's image collector asks dockerd: an image's id and size, the images containers
//! are made from, and removing one reference (`docker rmi` without force).

use std::collections::HashSet;

use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveImageOptionsBuilder};

use super::convert::map_err;
use super::Docker;
use crate::server::runtime::RuntimeError;

/// An image as the collector weighs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFacts {
    /// The image's id (`sha256:…`): references to the same image share it.
    pub id: String,
    /// Its size on disk as dockerd reports it, every layer counted (layers shared with other
    /// images too).
    pub size: u64,
}

impl Docker {
    /// The image under `reference`, or `None` when the node has none.
    pub async fn image_facts(&self, reference: &str) -> Result<Option<ImageFacts>, RuntimeError> {
        match self.inner.inspect_image(reference).await.map_err(map_err) {
            Ok(found) => Ok(found.id.map(|id| ImageFacts {
                id,
                size: found.size.unwrap_or(0).max(0) as u64,
            })),
            Err(RuntimeError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The ids of the images every container on the node (running or not) was made from.
    pub async fn image_ids_in_use(&self) -> Result<HashSet<String>, RuntimeError> {
        let options = ListContainersOptionsBuilder::new().all(true).build();
        let list = self
            .inner
            .list_containers(Some(options))
            .await
            .map_err(map_err)?;
        Ok(list.into_iter().filter_map(|c| c.image_id).collect())
    }

    /// Removes the reference `reference` (a tag or `repo@digest`) as `docker rmi` does without
    /// `--force`: the image itself goes only when no other reference names it, and dockerd refuses
    /// (a [`RuntimeError::Conflict`]) while a container is made from it. A reference already gone
    /// is not an error.
    pub async fn remove_image(&self, reference: &str) -> Result<(), RuntimeError> {
        let options = RemoveImageOptionsBuilder::new()
            .force(false)
            .noprune(false)
            .build();
        match self
            .inner
            .remove_image(reference, Some(options), None)
            .await
            .map_err(map_err)
        {
            Ok(_) | Err(RuntimeError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
