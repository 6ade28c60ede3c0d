//! How an SNS action reaches its handler: its input decoded, the handler called, its answer
//! encoded, with the types the action declares (`protocol::actions`), so a handler taking or
//! answering other types does not compile.

/// `sns_call!(self, (payload, protocol, ctx, action), Shape, handler)`.
macro_rules! sns_call {
    ($service:ident, ($payload:expr, $protocol:expr, $ctx:expr, $action:expr), $shape:ident, $handler:ident) => {{
        use crate::protocol::actions::sns_shape;
        let input: <sns_shape::$shape as crate::protocol::Shape>::Input<'_> =
            $payload.decode($protocol)?;
        let output: <sns_shape::$shape as crate::protocol::Shape>::Output<'_> =
            $service.$handler(input, $ctx).await?;
        Ok(crate::protocol::encode_ok(
            $protocol,
            crate::protocol::Action::Sns($action),
            &output,
            &$ctx.request_id,
        ))
    }};
}
