//! Every SQS and SNS action, declared once: its name, its request and answer types, and what
//! the layers need to know about it. Routing (an exhaustive match in `service`), SNS/SQS
//! detection and the unsigned-request rule (`http`), XML answers (whether a `<{Action}Result>` element is written) and the actions a policy
//! may grant are all derived from here; nothing below the protocol matches on action names.
//!
//! Flags:
//! - `Reads`: changes nothing (so SNS may serve it unsigned). ReceiveMessage is not one: it
//!   changes visibility.
//! - `NoResult`: the XML answer has no `<{Action}Result>` element.
//! - `Grantable`: AddPermission may name it in a policy.
//! - `Link`: SNS hands it out as a link (SubscribeURL, UnsubscribeURL), served unsigned.
//! - `OwnerOnly`: only the queue's own account may call it on a queue named by URL, whatever
//!   the queue's policy says ("Cross-account permissions don't apply to this action", SQS API
//!   reference): `service::access` refuses it. CreateQueue acts in the caller's own account
//!   anyway, and the move-task actions check their ARNs' account themselves.
//!
//! A handler is checked against its declaration where it is routed (`Shape`): a handler taking
//! or answering other types than declared does not compile, and an action declared without an
//! answer type does not parse.

use super::query_params::*;
use super::sns::*;
use super::sns_mobile::*;
use super::sqs::*;

/// An action's request and answer types; `'p` is the request payload's lifetime (requests
/// borrow strings from it, batch answers their entry ids).
pub trait Shape {
    type Input<'p>;
    type Output<'p>;
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Flag {
    Reads,
    NoResult,
    Grantable,
    Link,
    OwnerOnly,
}

macro_rules! declare_actions {
    (
        $(#[$doc:meta])*
        $enum:ident, $shapes:ident, $lt:lifetime;
        $( $name:ident ( $input:ty ) -> $output:ty [ $($list:ident),* ] $(, $flag:ident)* ; )*
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $enum {
            $($name),*
        }

        impl $enum {
            pub const ALL: &'static [$enum] = &[$($enum::$name),*];

            pub fn name(self) -> &'static str {
                match self {
                    $($enum::$name => stringify!($name)),*
                }
            }

            pub fn parse(name: &str) -> Option<$enum> {
                match name {
                    $(stringify!($name) => Some($enum::$name),)*
                    _ => None,
                }
            }

            fn flags(self) -> &'static [Flag] {
                match self {
                    $($enum::$name => &[$(Flag::$flag),*]),*
                }
            }

            /// Its Query list and map parameters (`protocol::query_params`).
            pub fn query_lists(self) -> &'static [QueryList] {
                match self {
                    $($enum::$name => &[$($list),*]),*
                }
            }

            /// Changes nothing.
            pub fn reads(self) -> bool {
                self.flags().contains(&Flag::Reads)
            }

            /// Only the resource's own account may call it.
            pub fn owner_only(self) -> bool {
                self.flags().contains(&Flag::OwnerOnly)
            }

            /// Whether the XML answer has a `<{Action}Result>` element.
            pub fn xml_result(self) -> bool {
                !self.flags().contains(&Flag::NoResult)
            }

            /// May be named in a policy by AddPermission.
            pub fn grantable(self) -> bool {
                self.flags().contains(&Flag::Grantable)
            }

            /// Handed out as a link by SNS (served unsigned).
            pub fn link(self) -> bool {
                self.flags().contains(&Flag::Link)
            }
        }

        /// Each action's request and answer types (see `Shape`).
        #[allow(non_camel_case_types)]
        pub mod $shapes {
            // Named from the crate root: the types this file imports.
            use crate::protocol::actions::*;
            $(
                pub struct $name;
                impl Shape for $name {
                    type Input<$lt> = $input;
                    type Output<$lt> = $output;
                }
            )*
        }
    };
}

declare_actions! {
    /// The SQS actions (both protocols).
    SqsAction, sqs_shape, 'p;
    CreateQueue(CreateQueueInput) -> QueueUrlOutput [ATTRIBUTES, CREATION_TAGS], OwnerOnly;
    GetQueueUrl(QueueNameInput) -> QueueUrlOutput [], Reads, Grantable;
    ListQueues(ListQueuesInput) -> ListQueuesOutput [], Reads;
    DeleteQueue(QueueUrlInput) -> Empty [], NoResult, OwnerOnly;
    GetQueueAttributes(GetQueueAttributesInput) -> AttributesOutput [ATTRIBUTE_NAMES], Reads, Grantable;
    SetQueueAttributes(SetQueueAttributesInput) -> Empty [ATTRIBUTES], NoResult, OwnerOnly;
    PurgeQueue(QueueUrlInput) -> Empty [], NoResult, Grantable;
    TagQueue(TagQueueInput) -> Empty [TAGS], NoResult, OwnerOnly;
    UntagQueue(UntagQueueInput) -> Empty [TAG_KEYS], NoResult, OwnerOnly;
    ListQueueTags(QueueUrlInput) -> TagsOutput [], Reads, Grantable, OwnerOnly;
    AddPermission(AddPermissionInput) -> Empty [ACCOUNT_IDS, ACTION_NAMES], NoResult, OwnerOnly;
    RemovePermission(RemovePermissionInput) -> Empty [], NoResult, OwnerOnly;
    ListDeadLetterSourceQueues(ListDeadLetterSourceQueuesInput)
        -> ListDeadLetterSourceQueuesOutput [], Reads, Grantable;
    SendMessage(SendMessageInput<'p>) -> SendMessageOutput<'p> [MESSAGE_ATTRIBUTES, MESSAGE_SYSTEM_ATTRIBUTES], Grantable;
    SendMessageBatch(SendMessageBatchInput<'p>) -> BatchOutput<SendMessageOutput<'p>> [SEND_ENTRIES];
    ReceiveMessage(ReceiveMessageInput<'p>) -> ReceiveMessageOutput [ATTRIBUTE_NAMES, MESSAGE_ATTRIBUTE_NAMES, MESSAGE_SYSTEM_ATTRIBUTE_NAMES], Grantable;
    DeleteMessage(DeleteMessageInput<'p>) -> Empty [], NoResult, Grantable;
    DeleteMessageBatch(HandleBatchInput<'p>) -> BatchOutput<IdOnly<'p>> [DELETE_ENTRIES];
    ChangeMessageVisibility(ChangeMessageVisibilityInput<'p>) -> Empty [], NoResult, Grantable;
    ChangeMessageVisibilityBatch(HandleBatchInput<'p>) -> BatchOutput<IdOnly<'p>> [VISIBILITY_ENTRIES];
    StartMessageMoveTask(StartMessageMoveTaskInput) -> StartMessageMoveTaskOutput [], Grantable, OwnerOnly;
    ListMessageMoveTasks(ListMessageMoveTasksInput) -> ListMessageMoveTasksOutput [], Reads, Grantable, OwnerOnly;
    CancelMessageMoveTask(CancelMessageMoveTaskInput) -> CancelMessageMoveTaskOutput [], Grantable, OwnerOnly;
}

declare_actions! {
    /// The SNS actions (Query protocol).
    SnsAction, sns_shape, 'p;
    CreateTopic(CreateTopicInput) -> TopicArnOutput [];
    DeleteTopic(TopicArnInput) -> Empty [], NoResult, Grantable;
    ListTopics(TopicArnInput) -> ListTopicsOutput [], Reads;
    GetTopicAttributes(TopicArnInput) -> AttributesMap [], Reads, Grantable;
    SetTopicAttributes(SetAttributeInput) -> Empty [], NoResult, Grantable;
    Subscribe(SubscribeInput) -> SubscriptionArnOutput [], Grantable;
    ConfirmSubscription(ConfirmSubscriptionInput) -> SubscriptionArnOutput [], Link;
    Unsubscribe(SubscriptionArnInput) -> Empty [], NoResult, Link;
    ListSubscriptions(TopicArnInput) -> ListSubscriptionsOutput [], Reads;
    ListSubscriptionsByTopic(TopicArnInput) -> ListSubscriptionsOutput [], Reads, Grantable;
    GetSubscriptionAttributes(SubscriptionArnInput) -> AttributesMap [], Reads;
    SetSubscriptionAttributes(SetAttributeInput) -> Empty [], NoResult;
    Publish(PublishInput) -> PublishOutput [], Grantable;
    PublishBatch(PublishBatchInput) -> PublishBatchOutput [];
    TagResource(TagResourceInput) -> Empty [], Grantable;
    UntagResource(TagResourceInput) -> Empty [], Grantable;
    ListTagsForResource(TagResourceInput) -> ListTagsOutput [], Reads, Grantable;
    AddPermission(PermissionInput) -> Empty [], NoResult, Grantable;
    RemovePermission(PermissionInput) -> Empty [], NoResult, Grantable;
    GetDataProtectionPolicy(DataProtectionPolicyInput) -> DataProtectionPolicyOutput [], Reads, Grantable;
    PutDataProtectionPolicy(DataProtectionPolicyInput) -> Empty [], NoResult, Grantable;
    CreatePlatformApplication(CreatePlatformApplicationInput) -> PlatformApplicationArnOutput [];
    GetPlatformApplicationAttributes(PlatformApplicationInput) -> AttributesMap [], Reads;
    SetPlatformApplicationAttributes(PlatformApplicationInput) -> Empty [], NoResult;
    ListPlatformApplications(NextTokenInput) -> ListPlatformApplicationsOutput [], Reads;
    DeletePlatformApplication(PlatformApplicationInput) -> Empty [], NoResult;
    CreatePlatformEndpoint(CreatePlatformEndpointInput) -> EndpointArnOutput [];
    GetEndpointAttributes(EndpointInput) -> AttributesMap [], Reads;
    SetEndpointAttributes(EndpointInput) -> Empty [], NoResult;
    ListEndpointsByPlatformApplication(PlatformApplicationInput) -> ListEndpointsOutput [], Reads;
    DeleteEndpoint(EndpointInput) -> Empty [], NoResult;
    SetSMSAttributes(SetSmsAttributesInput) -> Empty [];
    GetSMSAttributes(GetSmsAttributesInput) -> SmsAttributesOutput [], Reads;
    CheckIfPhoneNumberIsOptedOut(PhoneNumberInput) -> OptedOutOutput [];
    ListPhoneNumbersOptedOut(OptedOutPageInput) -> ListOptedOutOutput [], Reads;
    OptInPhoneNumber(PhoneNumberInput) -> Empty [];
    GetSMSSandboxAccountStatus(Empty) -> SandboxStatusOutput [], Reads;
    CreateSMSSandboxPhoneNumber(SandboxNumberInput) -> Empty [];
    VerifySMSSandboxPhoneNumber(SandboxNumberInput) -> Empty [];
    DeleteSMSSandboxPhoneNumber(SandboxNumberInput) -> Empty [];
    ListSMSSandboxPhoneNumbers(NextTokenInput) -> ListSandboxNumbersOutput [], Reads;
    ListOriginationNumbers(NextTokenInput) -> ListOriginationNumbersOutput [], Reads;
}

impl SqsAction {
    /// The action a policy must allow for this one: a batch is allowed as its single form.
    pub fn policy_action(self) -> SqsAction {
        match self {
            SqsAction::SendMessageBatch => SqsAction::SendMessage,
            SqsAction::DeleteMessageBatch => SqsAction::DeleteMessage,
            SqsAction::ChangeMessageVisibilityBatch => SqsAction::ChangeMessageVisibility,
            action => action,
        }
    }
}

/// What a topic policy may name beyond the actions Orderly serves (AWS's list).
pub const SNS_GRANTABLE_ONLY: &[&str] = &["Receive"];

/// An action of either service: what an answer needs to know to be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Sqs(SqsAction),
    Sns(SnsAction),
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Sqs(a) => a.name(),
            Action::Sns(a) => a.name(),
        }
    }

    pub fn xml_result(self) -> bool {
        match self {
            Action::Sqs(a) => a.xml_result(),
            Action::Sns(a) => a.xml_result(),
        }
    }
}

/// True for a name only SNS has: such a request is SNS even without a signature or Version
/// (the unsigned SubscribeURL and UnsubscribeURL links).
pub fn sns_only(name: &str) -> bool {
    SnsAction::parse(name).is_some() && SqsAction::parse(name).is_none()
}

/// May a queue policy statement name this action (AddPermission's `ActionName`)? `*` stands
/// for all of them.
pub fn sqs_grantable(name: &str) -> bool {
    name == "*" || SqsAction::parse(name).is_some_and(SqsAction::grantable)
}

/// May a topic policy statement name this action?
pub fn sns_grantable(name: &str) -> bool {
    SnsAction::parse(name).is_some_and(SnsAction::grantable) || SNS_GRANTABLE_ONLY.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_each_is_declared_once() {
        for a in SqsAction::ALL {
            assert_eq!(SqsAction::parse(a.name()), Some(*a));
        }
        for a in SnsAction::ALL {
            assert_eq!(SnsAction::parse(a.name()), Some(*a));
        }
        assert_eq!((SqsAction::ALL.len(), SnsAction::ALL.len()), (23, 42));
        assert_eq!(SqsAction::parse("sendmessage"), None);
    }

    #[test]
    fn reads_are_exactly_the_get_and_list_actions() {
        let names = SqsAction::ALL
            .iter()
            .map(|a| (a.name(), a.reads()))
            .chain(SnsAction::ALL.iter().map(|a| (a.name(), a.reads())));
        for (name, reads) in names {
            let get_or_list = name.starts_with("Get") || name.starts_with("List");
            assert_eq!(reads, get_or_list, "{name}");
        }
    }

    #[test]
    fn only_the_shared_names_are_not_sns_only() {
        let shared: Vec<&str> = SnsAction::ALL
            .iter()
            .map(|a| a.name())
            .filter(|n| !sns_only(n))
            .collect();
        assert_eq!(shared, ["AddPermission", "RemovePermission"]);
        assert!(!sns_only("SendMessage") && !sns_only("Nonsense"));
    }

    #[test]
    fn the_grantable_actions_are_awss_lists() {
        let sqs: Vec<&str> = SqsAction::ALL
            .iter()
            .filter(|a| a.grantable())
            .map(|a| a.name())
            .collect();
        assert_eq!(sqs.len(), 12, "{sqs:?}");
        assert!(sqs_grantable("*") && sqs_grantable("SendMessage"));
        assert!(!sqs_grantable("SendMessageBatch") && !sqs_grantable("CreateQueue"));
        assert!(sns_grantable("Receive") && sns_grantable("Publish"));
        assert!(!sns_grantable("CreateTopic") && !sns_grantable("ListTopics"));
    }

    #[test]
    fn every_sqs_action_is_owner_only_or_judged_by_a_grantable_action() {
        let owner_only: Vec<&str> = SqsAction::ALL
            .iter()
            .filter(|a| a.owner_only())
            .map(|a| a.name())
            .collect();
        assert_eq!(owner_only.len(), 11, "{owner_only:?}");
        assert!(owner_only.contains(&"TagQueue") && !owner_only.contains(&"PurgeQueue"));
        for action in SqsAction::ALL {
            let judged = action.policy_action();
            let unjudged = [SqsAction::ListQueues];
            assert!(
                action.owner_only() || judged.grantable() || unjudged.contains(action),
                "{} is neither owner-only nor allowed by a policy action",
                action.name()
            );
        }
    }
}
