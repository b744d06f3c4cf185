//! Ingress addresses on a network interface (`dataPath.interface`), added when a load balancer starts and
//! removed when it goes, over rtnetlink (as `ip address add|del ADDRESS/32 dev INTERFACE` would, without
//! needing the `ip` binary, which the daemon's image lacks). Needs `CAP_NET_ADMIN`; Linux only (elsewhere
//! both calls fail saying so).

#[cfg(not(target_os = "linux"))]
use std::net::IpAddr;

#[cfg(not(target_os = "linux"))]
pub(crate) async fn add(_interface: &str, _address: IpAddr) -> Result<bool, String> {
    Err("dataPath.interface needs Linux".to_string())
}

#[cfg(not(target_os = "linux"))]
pub(crate) async fn remove(_interface: &str, _address: IpAddr) -> Result<(), String> {
    Err("dataPath.interface needs Linux".to_string())
}

#[cfg(target_os = "linux")]
pub(crate) use netlink::{add, remove};

#[cfg(target_os = "linux")]
mod netlink {
    use std::io::ErrorKind;
    use std::net::IpAddr;

    use futures::TryStreamExt;
    use rtnetlink::Handle;

    /// Adds `address` (as a host address: /32 or /128) to `interface`: `true` when added, `false` when it
    /// was there already (then it is not this process's to remove).
    pub(crate) async fn add(interface: &str, address: IpAddr) -> Result<bool, String> {
        let handle = connect()?;
        let index = link_index(&handle, interface).await?;
        match handle
            .address()
            .add(index, address, host_prefix(address))
            .execute()
            .await
        {
            Ok(()) => Ok(true),
            Err(rtnetlink::Error::NetlinkError(e))
                if e.to_io().kind() == ErrorKind::AlreadyExists =>
            {
                Ok(false)
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Removes the host address `address` (/32 or /128) from `interface` (nothing to do when it is not
    /// there; the same address with another prefix length is not this process's and stays).
    pub(crate) async fn remove(interface: &str, address: IpAddr) -> Result<(), String> {
        let handle = connect()?;
        let index = link_index(&handle, interface).await?;
        let mut found = handle
            .address()
            .get()
            .set_link_index_filter(index)
            .set_address_filter(address)
            .execute();
        while let Some(message) = found.try_next().await.map_err(|e| e.to_string())? {
            if message.header.prefix_len != host_prefix(address) {
                continue;
            }
            handle
                .address()
                .del(message)
                .execute()
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// A netlink connection whose driver runs on the current runtime until the handle is dropped.
    fn connect() -> Result<Handle, String> {
        let (connection, handle, _) =
            rtnetlink::new_connection().map_err(|e| format!("opening a netlink socket: {e}"))?;
        tokio::spawn(connection);
        Ok(handle)
    }

    async fn link_index(handle: &Handle, interface: &str) -> Result<u32, String> {
        let mut links = handle
            .link()
            .get()
            .match_name(interface.to_string())
            .execute();
        match links.try_next().await {
            Ok(Some(link)) => Ok(link.header.index),
            Ok(None) => Err(format!("no interface {interface:?}")),
            Err(rtnetlink::Error::NetlinkError(e)) if e.to_io().kind() == ErrorKind::NotFound => {
                Err(format!("no interface {interface:?}"))
            }
            Err(e) => Err(format!("looking up interface {interface:?}: {e}")),
        }
    }

    fn host_prefix(address: IpAddr) -> u8 {
        if address.is_ipv4() { 32 } else { 128 }
    }
}
