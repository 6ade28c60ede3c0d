//! The frames of a link between nodes (`link_client`, `link_server`): a request passed on, or
//! its answer, as bytes. A frame is its length (4 bytes, big-endian, not counting itself), the
//! request's number on its link (8 bytes), then the request (method, path and query, headers,
//! body) or the answer (status, headers, body). Each length inside is checked against what is
//! left, so a malformed frame is refused whole, never read past its end.

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// What each side sends first on a new connection, and the listener answers back: its first
/// byte starts no HTTP request, so a node tells a link from HTTP by it, and a node of an
/// earlier build answers HTTP's 400 rather than this.
pub const PREFACE: &[u8; 16] = b"\0orderly-link/1\n";

/// The most header lines a frame may carry: more than any request the HTTP server takes (128,
/// and the few a node adds), far fewer than a header map can hold.
pub const MOST_HEADERS: usize = 256;

/// The frame head: its length, then the request's number.
pub const HEAD: usize = 4 + 8;

/// The number of the frame a listening node sends last as it closes a link: every request it
/// has not answered by then it never read (a request's number never comes near it).
pub const CLOSING: u64 = u64::MAX;

/// A request as a link carries it.
#[derive(Debug, PartialEq)]
pub struct LinkRequest {
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// An answer as a link carries it.
#[derive(Debug, PartialEq)]
pub struct LinkResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Appends request `id`'s frame to `out`.
pub fn encode_request(out: &mut BytesMut, id: u64, request: &LinkRequest) {
    let start = begin(out, id);
    let method = request.method.as_str().as_bytes();
    out.put_u8(method.len().min(u8::MAX as usize) as u8);
    out.put_slice(&method[..method.len().min(u8::MAX as usize)]);
    out.put_u32(request.path.len() as u32);
    out.put_slice(request.path.as_bytes());
    put_headers(out, &request.headers);
    out.put_slice(&request.body);
    end(out, start);
}

/// Appends the frame of the answer to request `id` to `out`.
pub fn encode_response(out: &mut BytesMut, id: u64, response: &LinkResponse) {
    let start = begin(out, id);
    out.put_u16(response.status.as_u16());
    put_headers(out, &response.headers);
    out.put_slice(&response.body);
    end(out, start);
}

/// What `next_frame` found at the front of a buffer.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// A whole frame, taken out: its number and what follows its head.
    Frame(u64, Bytes),
    /// The head of frame `id`, taken out, whose rest (`length` bytes, still to come or in the
    /// buffer) is longer than the limit.
    TooLong { id: u64, length: usize },
    /// Not all of the next frame has come.
    Incomplete,
    /// A head whose length cannot hold its own number: the stream is out of step.
    Malformed,
}

/// The next frame at the front of `buffer`, its rest at most `limit` bytes.
pub fn next_frame(buffer: &mut BytesMut, limit: usize) -> Next {
    let Some(head_bytes) = buffer.get(..HEAD) else {
        return Next::Incomplete;
    };
    let length = u32::from_be_bytes(head_bytes[..4].try_into().expect("four bytes")) as usize;
    let id = u64::from_be_bytes(head_bytes[4..].try_into().expect("eight bytes"));
    // The length counts the number too.
    let Some(length) = length.checked_sub(8) else {
        return Next::Malformed;
    };
    if length > limit {
        let _ = buffer.split_to(HEAD);
        return Next::TooLong { id, length };
    }
    if buffer.len() < HEAD + length {
        // Room for the rest at once, so it comes in as few reads as it can.
        buffer.reserve(HEAD + length - buffer.len());
        return Next::Incomplete;
    }
    let _ = buffer.split_to(HEAD);
    Next::Frame(id, buffer.split_to(length).freeze())
}

/// The request in a frame's `rest` (what follows its head), or `None` if malformed.
pub fn decode_request(mut rest: Bytes) -> Option<LinkRequest> {
    let method_len = take_u8(&mut rest)? as usize;
    let method = Method::from_bytes(&take(&mut rest, method_len)?).ok()?;
    let path_len = take_u32(&mut rest)? as usize;
    let path = String::from_utf8(take(&mut rest, path_len)?.to_vec()).ok()?;
    let headers = take_headers(&mut rest)?;
    Some(LinkRequest {
        method,
        path,
        headers,
        body: rest,
    })
}

/// The answer in a frame's `rest`, or `None` if malformed.
pub fn decode_response(mut rest: Bytes) -> Option<LinkResponse> {
    let status = StatusCode::from_u16(take_u16(&mut rest)?).ok()?;
    let headers = take_headers(&mut rest)?;
    Some(LinkResponse {
        status,
        headers,
        body: rest,
    })
}

fn begin(out: &mut BytesMut, id: u64) -> usize {
    let start = out.len();
    out.put_u32(0);
    out.put_u64(id);
    start
}

fn end(out: &mut BytesMut, start: usize) {
    let length = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&length.to_be_bytes());
}

fn put_headers(out: &mut BytesMut, headers: &HeaderMap) {
    // A header map holds far fewer than 65,535 lines (hyper's bound is a few hundred).
    let count = headers.len().min(u16::MAX as usize);
    out.put_u16(count as u16);
    for (name, value) in headers.iter().take(count) {
        out.put_u16(name.as_str().len() as u16);
        out.put_slice(name.as_str().as_bytes());
        out.put_u32(value.len() as u32);
        out.put_slice(value.as_bytes());
    }
}

fn take_headers(rest: &mut Bytes) -> Option<HeaderMap> {
    let count = take_u16(rest)? as usize;
    if count > MOST_HEADERS {
        return None;
    }
    let mut headers = HeaderMap::with_capacity(count);
    for _ in 0..count {
        let name_len = take_u16(rest)? as usize;
        let name = HeaderName::from_bytes(&take(rest, name_len)?).ok()?;
        let value_len = take_u32(rest)? as usize;
        let value = HeaderValue::from_maybe_shared(take(rest, value_len)?).ok()?;
        headers.try_append(name, value).ok()?;
    }
    Some(headers)
}

fn take(rest: &mut Bytes, length: usize) -> Option<Bytes> {
    (rest.len() >= length).then(|| rest.split_to(length))
}

fn take_u8(rest: &mut Bytes) -> Option<u8> {
    (!rest.is_empty()).then(|| rest.get_u8())
}

fn take_u16(rest: &mut Bytes) -> Option<u16> {
    (rest.len() >= 2).then(|| rest.get_u16())
}

fn take_u32(rest: &mut Bytes) -> Option<u32> {
    (rest.len() >= 4).then(|| rest.get_u32())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> LinkRequest {
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("node-a:4566"));
        headers.append(
            "x-amz-target",
            HeaderValue::from_static("AmazonSQS.SendMessage"),
        );
        headers.append("x-multi", HeaderValue::from_static("one"));
        headers.append("x-multi", HeaderValue::from_static("two"));
        LinkRequest {
            method: Method::POST,
            path: "/000000000000/prices.fifo?Action=SendMessage".into(),
            headers,
            body: Bytes::from_static(b"{\"MessageBody\":\"\\u00e9\"}"),
        }
    }

    fn split(frame: &mut BytesMut) -> (u64, Bytes) {
        let whole = frame.len();
        match next_frame(frame, 1 << 20) {
            Next::Frame(id, rest) => {
                assert_eq!(rest.len(), whole - HEAD, "the length counts the rest");
                (id, rest)
            }
            other => panic!("not a whole frame: {other:?}"),
        }
    }

    #[test]
    fn a_request_and_its_answer_come_out_as_they_went_in() {
        let mut frame = BytesMut::new();
        encode_request(&mut frame, 7, &request());
        let (id, rest) = split(&mut frame);
        assert_eq!(id, 7);
        assert_eq!(decode_request(rest), Some(request()));

        let mut headers = HeaderMap::new();
        headers.insert(
            "content-type",
            HeaderValue::from_static("application/x-amz-json-1.0"),
        );
        let answer = LinkResponse {
            status: StatusCode::SERVICE_UNAVAILABLE,
            headers,
            body: Bytes::from_static(b"{}"),
        };
        let mut frame = BytesMut::new();
        encode_response(&mut frame, u64::MAX, &answer);
        let (id, rest) = split(&mut frame);
        assert_eq!(id, u64::MAX);
        assert_eq!(decode_response(rest), Some(answer));
    }

    #[test]
    fn frames_are_taken_whole_from_a_buffer_as_they_come() {
        let mut sent = BytesMut::new();
        encode_request(&mut sent, 1, &request());
        encode_request(&mut sent, 2, &request());
        let whole = sent.len();
        let mut buffer = BytesMut::new();
        let mut taken = Vec::new();
        // Byte by byte: a frame comes out once, and only once all of it is in.
        for byte in sent.iter() {
            buffer.extend_from_slice(&[*byte]);
            match next_frame(&mut buffer, 1 << 20) {
                Next::Frame(id, rest) => taken.push((id, decode_request(rest).expect("a request"))),
                Next::Incomplete => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(taken, [(1, request()), (2, request())]);
        assert!(buffer.is_empty());
        // Longer than the limit: known by its head alone, which is taken out.
        let mut buffer = BytesMut::new();
        encode_request(&mut buffer, 3, &request());
        buffer.truncate(HEAD + 1);
        let length = whole / 2 - HEAD;
        assert_eq!(next_frame(&mut buffer, 16), Next::TooLong { id: 3, length });
        assert_eq!(buffer.len(), 1);
        // A length too short to hold the number.
        let mut buffer = BytesMut::from(&[0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 1][..]);
        assert_eq!(next_frame(&mut buffer, 16), Next::Malformed);
    }

    #[test]
    fn a_frame_cut_short_anywhere_before_its_body_is_refused() {
        let mut frame = BytesMut::new();
        encode_request(&mut frame, 1, &request());
        let (_, rest) = split(&mut frame);
        let body_at = rest.len() - request().body.len();
        for cut in 0..body_at {
            assert_eq!(decode_request(rest.slice(..cut)), None, "cut at {cut}");
        }
        // A header name that no header may have.
        let mut bad = BytesMut::new();
        bad.put_u16(200);
        bad.put_u16(1);
        bad.put_u16(3);
        bad.put_slice(b"a b");
        bad.put_u32(0);
        assert_eq!(decode_response(bad.freeze()), None);
        // More header lines than any request may have.
        let mut bad = BytesMut::new();
        bad.put_u16(200);
        bad.put_u16((MOST_HEADERS + 1) as u16);
        assert_eq!(decode_response(bad.freeze()), None);
        // A status no answer may have.
        let mut bad = BytesMut::new();
        bad.put_u16(1_000);
        bad.put_u16(0);
        assert_eq!(decode_response(bad.freeze()), None);
    }
}
