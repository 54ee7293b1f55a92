//! Statuses are part of the public contract: upper case everywhere, in text and JSON.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! upper_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name {
            $(#[serde(rename = $text)] $variant),+
        }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s.to_ascii_uppercase().as_str() {
                    $($text => Ok($name::$variant),)+
                    _ => Err(format!("unknown {} {s:?}", stringify!($name))),
                }
            }
        }
    };
}

upper_enum!(
    /// A workflow's status.
    WorkflowStatus {
        Pending => "PENDING",
        Running => "RUNNING",
        Finished => "FINISHED",
        Failed => "FAILED",
        Stopped => "STOPPED",
    }
);

upper_enum!(
    /// The status of a job, service or build (a *task*), and of each of its attempts.
    /// STARTED: placed and preparing (pulling, unpacking, building).
    /// RUNNING: its process runs (for a service: its readiness probe passed).
    TaskStatus {
        Pending => "PENDING",
        Started => "STARTED",
        Running => "RUNNING",
        Finished => "FINISHED",
        Failed => "FAILED",
        Stopped => "STOPPED",
    }
);

upper_enum!(
    /// A node's state. A held node shows its holds too.
    NodeState {
        Ready => "READY",
        Cordoned => "CORDONED",
        Evicting => "EVICTING",
        Down => "DOWN",
    }
);

upper_enum!(
    /// Why an attempt ended. Retry decisions read this, never the exit code.
    EndCause {
        Exit => "EXIT",
        Timeout => "TIMEOUT",
        Stopped => "STOPPED",
        NodeLost => "NODE_LOST",
        Evicted => "EVICTED",
        StartError => "START_ERROR",
        DependencyFailed => "DEPENDENCY_FAILED",
        // Another member of its multinode job (gang) ended, and the gang ends with it: the
        // member's task follows the gang's fate (finished, retried or failed).
        Gang => "GANG",
    }
);

impl WorkflowStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Finished | Self::Failed | Self::Stopped)
    }
}

impl TaskStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Finished | Self::Failed | Self::Stopped)
    }
}
