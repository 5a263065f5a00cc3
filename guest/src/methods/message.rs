//! Reading a message ("Messages", "Parts", "Image parts", "forgetSession"):
//! SendMessage's and SendStreamingMessage's `params.message`, read in full or
//! refused, with the checks in the reference's order.

use base64::Engine;
use serde_json::{Map, Value};

use crate::imports::model::{Capsule, Image, Transport};
use crate::rpc::errors::{InvalidParams, RpcError};
use crate::rpc::extensions;

/// The most distinct tasks a message may reference.
pub const MAX_REFERENCES: usize = 16;

/// The image media types the door reads.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// A text or data part, in message order; images are kept apart.
#[derive(Clone, Debug, PartialEq)]
pub enum Part {
    Text(String),
    Data {
        value: Value,
        media_type: Option<String>,
        filename: Option<String>,
    },
}

/// A message the door read in full.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// The task it continues; "" names none.
    pub task_id: Option<String>,
    /// "" reads as none: a new task is given a fresh context.
    pub context_id: Option<String>,
    /// Each id once, in first-occurrence order.
    pub reference_task_ids: Vec<String>,
    pub forget_session: bool,
    /// `message.metadata` holds the door extension's URI.
    pub uses_door_extension: bool,
    pub parts: Vec<Part>,
    pub images: Vec<Image>,
    pub return_immediately: bool,
}

fn invalid(which: InvalidParams<'_>) -> RpcError {
    RpcError::invalid_params(which)
}

/// Reads `params.message` and `params.configuration`, checks 1 to 11.
pub fn read(params: &Map<String, Value>, capsule: &Capsule) -> Result<Message, RpcError> {
    // 1. params.message is an object.
    let message = match params.get("message") {
        Some(Value::Object(message)) => message,
        Some(_) => return Err(invalid(InvalidParams::MessageNotObject)),
        None => return Err(invalid(InvalidParams::MessageRequired)),
    };
    // 2. messageId, role, then parts.
    match message.get("messageId") {
        Some(Value::String(id)) if !id.is_empty() => {}
        _ => return Err(invalid(InvalidParams::MessageId)),
    }
    if message.get("role") != Some(&Value::String("ROLE_USER".into())) {
        return Err(invalid(InvalidParams::Role));
    }
    let parts = match message.get("parts") {
        Some(Value::Array(parts)) if !parts.is_empty() => parts,
        _ => return Err(invalid(InvalidParams::Parts)),
    };
    // 3. Every part sets exactly one of text, raw, url and data.
    let parts = parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            let part = part
                .as_object()
                .ok_or_else(|| invalid(InvalidParams::PartNotObject(i)))?;
            let set = ["text", "raw", "url", "data"]
                .into_iter()
                .filter(|k| part.contains_key(*k))
                .count();
            if set != 1 {
                return Err(invalid(InvalidParams::PartKind(i)));
            }
            Ok(part)
        })
        .collect::<Result<Vec<_>, _>>()?;
    // 4. text, raw, url, mediaType and filename are strings where present.
    for (i, part) in parts.iter().enumerate() {
        for key in ["text", "raw", "url", "mediaType", "filename"] {
            if part.get(key).is_some_and(|v| !v.is_string()) {
                return Err(invalid(InvalidParams::PartField { index: i, key }));
            }
        }
    }
    // 5. taskId and contextId, then referenceTaskIds.
    let task_id = optional_string(message, "taskId")?;
    let context_id = optional_string(message, "contextId")?;
    let reference_task_ids = references(message)?;
    // 6. The door extension's key in metadata, then its forgetSession.
    let (uses_door_extension, forget_session) = forget_session(message, task_id.as_deref())?;
    // 7. configuration.returnImmediately.
    let configuration = params.get("configuration").and_then(Value::as_object);
    let return_immediately = match configuration.and_then(|c| c.get("returnImmediately")) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid(InvalidParams::ReturnImmediately)),
    };
    // 8. The first url part, or raw part that is not an image: -32005.
    for (i, part) in parts.iter().enumerate() {
        let media_type = part.get("mediaType").and_then(Value::as_str);
        if part.contains_key("url") {
            return Err(RpcError::url_part(i, media_type));
        }
        if part.contains_key("raw") && !media_type.is_some_and(|t| IMAGE_TYPES.contains(&t)) {
            return Err(RpcError::raw_part(i, media_type));
        }
    }
    // 9. A push notification config: -32003.
    if configuration
        .and_then(|c| c.get("taskPushNotificationConfig"))
        .is_some_and(|v| !v.is_null())
    {
        return Err(RpcError::push_not_supported());
    }
    // 10. forgetSession to a capsule without a harness session.
    if forget_session && capsule.transport != Transport::Process {
        return Err(invalid(InvalidParams::ForgetSessionWithoutProcess));
    }
    // 11. The image parts, in order.
    let mut images = Vec::new();
    let mut read_parts = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let media_type = part
            .get("mediaType")
            .and_then(Value::as_str)
            .map(str::to_string);
        let filename = part
            .get("filename")
            .and_then(Value::as_str)
            .map(str::to_string);
        if let Some(text) = part.get("text").and_then(Value::as_str) {
            read_parts.push(Part::Text(text.to_string()));
        } else if let Some(value) = part.get("data") {
            read_parts.push(Part::Data {
                value: value.clone(),
                media_type,
                filename,
            });
        } else if let Some(raw) = part.get("raw").and_then(Value::as_str) {
            let media_type = media_type.unwrap_or_default();
            images.push(image(
                i,
                raw,
                media_type,
                images.len(),
                task_id.as_deref(),
                capsule,
            )?);
        }
    }
    Ok(Message {
        task_id,
        context_id,
        reference_task_ids,
        forget_session,
        uses_door_extension,
        parts: read_parts,
        images,
        return_immediately,
    })
}

/// A string member; absent and "" read as none.
fn optional_string(message: &Map<String, Value>, key: &str) -> Result<Option<String>, RpcError> {
    match message.get(key) {
        None => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(invalid(InvalidParams::MessageField(key))),
    }
}

/// referenceTaskIds: non-empty strings naming at most 16 distinct tasks,
/// kept once each in first-occurrence order.
fn references(message: &Map<String, Value>) -> Result<Vec<String>, RpcError> {
    let Some(value) = message.get("referenceTaskIds") else {
        return Ok(Vec::new());
    };
    let malformed = || invalid(InvalidParams::References);
    let mut ids: Vec<String> = Vec::new();
    for id in value.as_array().ok_or_else(malformed)? {
        let id = id
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(malformed)?;
        if !ids.iter().any(|seen| seen == id) {
            ids.push(id.to_string());
        }
    }
    if ids.len() > MAX_REFERENCES {
        return Err(invalid(InvalidParams::TooManyReferences {
            names: ids.len(),
            most: MAX_REFERENCES,
        }));
    }
    Ok(ids)
}

/// The door extension's object in `message.metadata` and its forgetSession
/// ("forgetSession"). Metadata that is not an object is ignored.
fn forget_session(
    message: &Map<String, Value>,
    task_id: Option<&str>,
) -> Result<(bool, bool), RpcError> {
    let Some(door) = message
        .get("metadata")
        .and_then(Value::as_object)
        .and_then(|m| m.get(extensions::DOOR))
    else {
        return Ok((false, false));
    };
    let door = door
        .as_object()
        .ok_or_else(|| invalid(InvalidParams::DoorMetadataNotObject))?;
    let forget = match door.get("forgetSession") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid(InvalidParams::ForgetSessionNotBoolean)),
    };
    if let (true, Some(task_id)) = (forget, task_id) {
        return Err(invalid(InvalidParams::ForgetSessionContinues(task_id)));
    }
    Ok((true, forget))
}

/// Check 11 for one image part ("Image parts"), in the table's order.
fn image(
    index: usize,
    raw: &str,
    media_type: String,
    earlier: usize,
    task_id: Option<&str>,
    capsule: &Capsule,
) -> Result<Image, RpcError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(raw)
        .map_err(|_| invalid(InvalidParams::ImageNotBase64(index)))?;
    if !is_image_of(&bytes, &media_type) {
        return Err(invalid(InvalidParams::ImageNotOfType {
            index,
            media_type: &media_type,
        }));
    }
    let limits = capsule.images;
    if bytes.len() as u64 > limits.max_bytes {
        return Err(invalid(InvalidParams::ImageTooLarge {
            index,
            bytes: bytes.len(),
            max_bytes: limits.max_bytes,
        }));
    }
    if earlier >= limits.max_per_turn as usize {
        return Err(invalid(InvalidParams::ImageOverLimit {
            index,
            max_per_turn: limits.max_per_turn,
        }));
    }
    if let Some(task_id) = task_id {
        return Err(invalid(InvalidParams::ImageContinues { index, task_id }));
    }
    if capsule.transport == Transport::Process {
        return Err(invalid(InvalidParams::ImageToProcess(index)));
    }
    Ok(Image { media_type, bytes })
}

/// The first bytes of each image type the door reads.
fn is_image_of(bytes: &[u8], media_type: &str) -> bool {
    match media_type {
        "image/png" => bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "image/jpeg" => bytes.starts_with(b"\xff\xd8\xff"),
        "image/gif" => bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a"),
        "image/webp" => bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP",
        _ => false,
    }
}
