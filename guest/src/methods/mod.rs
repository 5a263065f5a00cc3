//! The A2A methods POST / serves: the list the door extension declares and
//! step 10 reads ([`extension_methods`]), a message and a task as the wire
//! carries them ([`message`], [`task`]), the text the agent receives
//! ([`agent_text`]), SendMessage ([`send`]), GetTask, CancelTask and
//! ListTasks ([`task_methods`], [`listing`]), and the streams ([`streams`]).

pub mod agent_text;
pub mod extension_methods;
pub mod listing;
pub mod message;
pub mod send;
pub mod streams;
pub mod task;
pub mod task_methods;
