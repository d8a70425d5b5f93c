//! The communication manager's reading of received MADs (`uhca_driver::cm::msg::decode`):
//! what arrives on QP1 is anyone's bytes.
//!
//! Properties: nothing panics; a MAD that decodes is a CM `Send` of a taken attribute, and
//! the message re-encoded (in the same transaction) decodes to the same message; decoding
//! looks at no byte past the 256 of a MAD.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uhca_driver::cm::msg::{self, CmMsg, MAD_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok((h, m)) = msg::decode(data) else {
        return;
    };
    assert_eq!(
        (h.base_version, h.mgmt_class, h.class_version, h.method),
        (1, 7, 2, 3)
    );
    let mut again = [0u8; MAD_LEN];
    match m {
        CmMsg::Req(r) => r.encode(h.transaction_id, &mut again),
        CmMsg::Rep(r) => r.encode(h.transaction_id, &mut again),
        CmMsg::Rtu(r) => r.encode(h.transaction_id, &mut again),
        CmMsg::Rej(r) => r.encode(h.transaction_id, &mut again),
        CmMsg::Mra(r) => r.encode(h.transaction_id, &mut again),
    }
    let (h2, m2) = msg::decode(&again).expect("an encoded message decodes");
    assert_eq!(
        (h2.transaction_id, h2.attr_id),
        (h.transaction_id, h.attr_id)
    );
    assert_eq!(m2, m, "re-encoded and decoded again");
    // Bytes after the MAD change nothing.
    let mut longer = data[..MAD_LEN].to_vec();
    longer.extend_from_slice(&[0xa5; 16]);
    assert_eq!(msg::decode(&longer).unwrap().1, m);
});
