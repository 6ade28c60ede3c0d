//! Parcels as one node hands them to another: the destination shard's leader pulls them from
//! the source's (`backend::sharded::across_nodes`). Each is written as a log record holds it,
//! after this build's format version, so nodes of different versions refuse each other's.

use super::relay::DiskParcelChange;
use super::{FormatError, VERSION};
use crate::engine::parcel::{Parcel, ParcelChange};

/// Parcels for shard `to` as one node hands them to another (the destination's leader pulls
/// them from the source's): this build's format version, then each parcel as a log record
/// holds it.
pub fn encode_parcels(to: u32, parcels: &[Parcel]) -> postcard::Result<Vec<u8>> {
    let changes: Vec<ParcelChange> = (parcels.iter())
        .map(|parcel| ParcelChange::Sent {
            to,
            parcel: parcel.clone(),
        })
        .collect();
    let disk: Vec<DiskParcelChange<'_>> = changes.iter().map(DiskParcelChange::from).collect();
    postcard::to_stdvec(&(u32::from(VERSION), disk))
}

/// The parcels `encode_parcels` wrote for shard `to`; refused when written by another format
/// version or for another shard, or damaged.
pub fn decode_parcels(to: u32, bytes: &[u8]) -> Result<Vec<Parcel>, FormatError> {
    let (version, rest) = postcard::take_from_bytes::<u32>(bytes)
        .map_err(|e| FormatError::Damaged(format!("parcels from another node: {e}")))?;
    if version != u32::from(VERSION) {
        return Err(FormatError::Damaged(format!(
            "parcels from another node in format version {version}, where this build writes {}: \
             nodes of one database run one version",
            VERSION
        )));
    }
    let disk: Vec<DiskParcelChange<'_>> = postcard::from_bytes(rest)
        .map_err(|e| FormatError::Damaged(format!("parcels from another node: {e}")))?;
    (disk.into_iter())
        .map(|change| match change.into_live() {
            ParcelChange::Sent {
                to: sent_to,
                parcel,
            } if sent_to == to => Ok(parcel),
            _ => Err(FormatError::Damaged(format!(
                "parcels from another node: one is not a parcel for shard {to}"
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parcels_of_another_version_shard_or_shape_are_refused() {
        let none = encode_parcels(2, &[]).unwrap();
        assert!(decode_parcels(2, &none).unwrap().is_empty());
        let newer = postcard::to_stdvec(&(u32::from(VERSION) + 1, Vec::<u8>::new())).unwrap();
        let refused = decode_parcels(2, &newer).unwrap_err().to_string();
        assert!(refused.contains("format version"), "{refused}");
        let forgotten = ParcelChange::Forgotten { to: 2, through: 9 };
        let disk = vec![DiskParcelChange::from(&forgotten)];
        let not_parcels = postcard::to_stdvec(&(u32::from(VERSION), disk)).unwrap();
        let refused = decode_parcels(2, &not_parcels).unwrap_err().to_string();
        assert!(refused.contains("not a parcel for shard 2"), "{refused}");
        assert!(decode_parcels(2, &[0xff, 0xff]).is_err());
    }
}
