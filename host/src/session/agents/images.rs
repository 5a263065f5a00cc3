//! A task's images as files for an agent of its own process: written, before
//! the agent is told of them, to a directory of their own (mode 0700, under
//! the temporary directory), `1.png`, `2.jpeg`, … in part order, each named
//! by its place and its media type's subtype; removed with the
//! [`ImageFiles`] that wrote them.

use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

use crate::session::tasks::Image;

/// A task's images as files, removed with it.
pub struct ImageFiles {
    dir: Option<PathBuf>,
    files: Vec<PathBuf>,
}

impl ImageFiles {
    /// Writes `images` into a new directory named by `key` (a task's id, and
    /// which reply of it); none when there are no images.
    pub fn write(key: &str, images: &[Image]) -> std::io::Result<ImageFiles> {
        let mut written = ImageFiles {
            dir: None,
            files: Vec::new(),
        };
        if images.is_empty() {
            return Ok(written);
        }
        let dir = std::env::temp_dir().join(format!("murmur-images-{key}"));
        // Not recursive: a directory already there (another's) is an error.
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        written.dir = Some(dir.clone());
        for (i, image) in images.iter().enumerate() {
            let subtype = image
                .media_type
                .strip_prefix("image/")
                .filter(|s| s.bytes().all(|b| b.is_ascii_alphanumeric()))
                .unwrap_or("bin");
            let file = dir.join(format!("{}.{subtype}", i + 1));
            std::fs::write(&file, &image.bytes)?;
            written.files.push(file);
        }
        Ok(written)
    }

    /// The files, in part order.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// `MURMUR_IMAGES`: the files' paths, one a line.
    pub fn paths(&self) -> Option<String> {
        (!self.files.is_empty()).then(|| {
            self.files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join("\n")
        })
    }
}

impl Drop for ImageFiles {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
