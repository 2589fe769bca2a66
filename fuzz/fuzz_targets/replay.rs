//! Every policy replaying an arbitrary trace: never a panic; each line
//! either parses or is refused with an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_autothrottle::policy::{
    replay, Adaptive, Aimd, Gradient2, MakePolicy, Scrapy, Scrapy2012, Vegas,
};

fuzz_target!(|data: &[u8]| {
    let policies: [Box<dyn MakePolicy>; 6] = [
        Box::new(Adaptive::default()),
        Box::new(Scrapy::default()),
        Box::new(Scrapy2012::default().check_period(2)),
        Box::new(Aimd::default()),
        Box::new(Vegas::default()),
        Box::new(Gradient2::default()),
    ];
    for policy in &policies {
        let mut out = Vec::new();
        let _ = replay(&**policy, data, &mut out);
    }
});
