//! Durability, first layer (issue 5, in progress): the write-ahead log's record framing
//! (`record`), its segment files (`log`) and the file I/O trait tests inject faults through
//! (`storage`). Not yet wired to the engine: the server still runs in memory.

pub mod log;
pub mod record;
pub mod storage;
