//! Batched renewal: the leases of one client are renewed in one `lease.renew_many` call per
//! interval, each lease's loss decided on its own.
