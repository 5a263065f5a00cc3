//! The door extension's method list ("Door extension"): every JSON-RPC
//! method POST / knows, the ones the extension lists for each kind of door,
//! and how step 10 answers a method it does not list.

use crate::imports::model::{Capsule, Scope};
use crate::rpc::errors::RpcError;

/// Every method POST / knows, in the door extension's order, then the four push
/// config methods, which the door answers but does not serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    SendMessage,
    SendStreamingMessage,
    WatchSession,
    GetTask,
    ListTasks,
    CancelTask,
    SubscribeToTask,
    StopSession,
    GetExtendedAgentCard,
    PushConfig,
}

impl Method {
    /// The served methods in the door extension's order.
    const ORDER: [Method; 9] = [
        Method::SendMessage,
        Method::SendStreamingMessage,
        Method::WatchSession,
        Method::GetTask,
        Method::ListTasks,
        Method::CancelTask,
        Method::SubscribeToTask,
        Method::StopSession,
        Method::GetExtendedAgentCard,
    ];

    /// Matches a method name exactly: case and whitespace are significant.
    pub fn parse(name: &str) -> Option<Method> {
        Some(match name {
            "SendMessage" => Method::SendMessage,
            "SendStreamingMessage" => Method::SendStreamingMessage,
            "murmur.WatchSession" => Method::WatchSession,
            "GetTask" => Method::GetTask,
            "ListTasks" => Method::ListTasks,
            "CancelTask" => Method::CancelTask,
            "SubscribeToTask" => Method::SubscribeToTask,
            "murmur.StopSession" => Method::StopSession,
            "GetExtendedAgentCard" => Method::GetExtendedAgentCard,
            "CreateTaskPushNotificationConfig"
            | "GetTaskPushNotificationConfig"
            | "ListTaskPushNotificationConfigs"
            | "DeleteTaskPushNotificationConfig" => Method::PushConfig,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Method::SendMessage => "SendMessage",
            Method::SendStreamingMessage => "SendStreamingMessage",
            Method::WatchSession => "murmur.WatchSession",
            Method::GetTask => "GetTask",
            Method::ListTasks => "ListTasks",
            Method::CancelTask => "CancelTask",
            Method::SubscribeToTask => "SubscribeToTask",
            Method::StopSession => "murmur.StopSession",
            Method::GetExtendedAgentCard => "GetExtendedAgentCard",
            Method::PushConfig => "push notification config",
        }
    }

    /// The scope a token needs (step 11). GetExtendedAgentCard needs none.
    pub fn scope(self) -> Option<Scope> {
        Some(match self {
            Method::SendMessage => Scope::SendMessage,
            Method::SendStreamingMessage => Scope::SendStreamingMessage,
            Method::WatchSession => Scope::WatchSession,
            Method::GetTask => Scope::GetTask,
            Method::ListTasks => Scope::ListTasks,
            Method::CancelTask => Scope::CancelTask,
            Method::SubscribeToTask => Scope::SubscribeToTask,
            Method::StopSession => Scope::StopSession,
            Method::GetExtendedAgentCard | Method::PushConfig => return None,
        })
    }

    /// Whether this door lists the method in its door extension.
    pub fn served_by(self, capsule: &Capsule) -> bool {
        match self {
            Method::SendMessage | Method::SendStreamingMessage | Method::SubscribeToTask => {
                capsule.starts_tasks()
            }
            Method::GetExtendedAgentCard => capsule.authenticated,
            Method::PushConfig => false,
            _ => true,
        }
    }

    /// The methods the door extension lists, in order.
    pub fn served(capsule: &Capsule) -> Vec<&'static str> {
        Method::ORDER
            .iter()
            .filter(|m| m.served_by(capsule))
            .map(|m| m.name())
            .collect()
    }

    /// Step 10: the method, or the error that answers it on this door.
    pub fn resolve(name: &str, capsule: &Capsule) -> Result<Method, RpcError> {
        let method = Method::parse(name).ok_or_else(RpcError::method_not_found)?;
        if method.served_by(capsule) {
            return Ok(method);
        }
        Err(match method {
            Method::PushConfig => RpcError::push_not_supported(),
            Method::GetExtendedAgentCard => RpcError::no_extended_card(method.name()),
            Method::SendStreamingMessage | Method::SubscribeToTask => {
                RpcError::starts_no_task(method.name())
            }
            _ => RpcError::method_not_found(),
        })
    }
}
