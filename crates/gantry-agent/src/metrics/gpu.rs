//! GPU health through NVML, loaded when the agent runs.
//!
//! `nvml-wrapper` opens `libnvidia-ml.so.1` with `dlopen` (through `libloading`) when
//! [`nvml_source`] is first called; it has no build script and no link-time dependency on
//! anything from NVIDIA. A node without GPUs, drivers or the library gets [`NoGpus`] and only
//! `gantry_gpu_count 0`.
//!
//! Reading is behind the [`GpuSource`] trait so the exporter can be tested without a GPU.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    EccCounter, MemoryError, RetirementCause, TemperatureSensor,
};
use nvml_wrapper::enums::device::DeviceArchitecture;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, EventSet, Nvml};

/// One GPU's health, as read at one moment. `None` means the GPU (or its driver, or its
/// configuration: ECC off, no row remapping before Ampere, no page retirement after Volta)
/// does not support that query; its series are left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuReading {
    /// NVML's index of the device.
    pub index: u32,
    pub uuid: String,
    pub temperature_celsius: Option<u32>,
    /// Aggregate (lifetime) corrected ECC errors: the `single` bit ones.
    pub ecc_corrected: Option<u64>,
    /// Aggregate (lifetime) uncorrected ECC errors: the `double` bit ones.
    pub ecc_uncorrected: Option<u64>,
    /// Pages retired after multiple single-bit errors.
    pub retired_pages_single: Option<u64>,
    /// Pages retired after a double-bit error.
    pub retired_pages_double: Option<u64>,
    pub remapped_rows: Option<RemappedRows>,
    /// The last XID error this agent saw for the GPU; 0 when none.
    pub last_xid: u64,
    /// XID error events seen since the agent started.
    pub xid_events: u64,
    pub throttle: Option<Throttle>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemappedRows {
    pub correctable: u64,
    pub uncorrectable: u64,
    /// A remapping waits for the GPU to be reset.
    pub pending: bool,
    /// A remapping failed: the GPU needs replacing.
    pub failed: bool,
}

/// The clock throttle reasons that mean trouble (not the ordinary idle or power-cap ones).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Throttle {
    pub hw_slowdown: bool,
    pub hw_thermal: bool,
    pub sw_thermal: bool,
    pub power_brake: bool,
}

/// Where GPU readings come from. `read` may block (NVML calls can hang on a GPU in a bad
/// state), so it is only ever called from a background thread, never from a scrape.
pub trait GpuSource: Send + Sync {
    /// Every GPU that answers. An empty list means no GPUs (or no NVML).
    fn read(&self) -> Vec<GpuReading>;
}

/// A node without NVML.
#[derive(Debug, Default)]
pub struct NoGpus;

impl GpuSource for NoGpus {
    fn read(&self) -> Vec<GpuReading> {
        Vec::new()
    }
}

/// This process's GPU source: NVML when it loads, otherwise [`NoGpus`]. NVML is initialised
/// once per process and shared (the agents of `gantry up` share one machine's GPUs).
pub fn nvml_source() -> Arc<dyn GpuSource> {
    static SOURCE: OnceLock<Arc<dyn GpuSource>> = OnceLock::new();
    SOURCE
        .get_or_init(|| match NvmlGpus::init() {
            Ok(s) => {
                tracing::info!("NVML loaded: exporting GPU health");
                Arc::new(s)
            }
            Err(e) => {
                tracing::info!("no GPU metrics: NVML is not available ({e})");
                Arc::new(NoGpus)
            }
        })
        .clone()
}

/// Whether NVML loads on this machine (it is then the source [`nvml_source`] returns).
pub fn nvml_available() -> bool {
    nvml_source();
    NVML.get().is_some_and(Option::is_some)
}

/// The library handle lives for the whole process: event sets borrow it.
static NVML: OnceLock<Option<Nvml>> = OnceLock::new();

/// What this process knows of one GPU's XID events.
struct XidState {
    /// The device's own event set; `None` when the GPU cannot report XIDs.
    events: Option<EventSet<'static>>,
    last: u64,
    count: u64,
}

/// GPU readings through NVML.
pub struct NvmlGpus {
    nvml: &'static Nvml,
    /// Per device UUID. NVML's event sets are not thread-safe: the lock serialises them.
    xids: Mutex<HashMap<String, XidState>>,
}

impl NvmlGpus {
    fn init() -> Result<Self, NvmlError> {
        let nvml = NVML
            .get_or_init(|| match Nvml::init() {
                Ok(n) => Some(n),
                Err(e) => {
                    tracing::debug!("NVML: {e}");
                    None
                }
            })
            .as_ref()
            .ok_or(NvmlError::DriverNotLoaded)?;
        Ok(NvmlGpus {
            nvml,
            xids: Mutex::new(HashMap::new()),
        })
    }

    /// Registers a device for XID events (once), then takes every event already waiting,
    /// without blocking.
    fn poll_xids(&self, device: &Device<'static>, uuid: &str) -> (u64, u64) {
        let mut xids = crate::lock(&self.xids);
        let state = xids.entry(uuid.to_owned()).or_insert_with(|| XidState {
            events: register_xids(self.nvml, device),
            last: 0,
            count: 0,
        });
        if let Some(set) = &state.events {
            // A zero timeout returns at once: an event if one waits, else `Timeout`.
            while let Ok(ev) = set.wait(0) {
                if !ev.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
                    continue;
                }
                state.count += 1;
                if let Some(XidError::Value(x)) = ev.event_data {
                    state.last = x;
                }
            }
        }
        (state.last, state.count)
    }

    fn read_device(&self, index: u32) -> Option<GpuReading> {
        let device = self.nvml.device_by_index(index).ok()?;
        let uuid = device.uuid().ok()?;
        let (last_xid, xid_events) = self.poll_xids(&device, &uuid);
        let ecc = |t| device.total_ecc_errors(t, EccCounter::Aggregate).ok();
        let retired = |c| device.retired_pages(c).ok().map(|pages| pages.len() as u64);
        Some(GpuReading {
            index,
            temperature_celsius: device.temperature(TemperatureSensor::Gpu).ok(),
            ecc_corrected: ecc(MemoryError::Corrected),
            ecc_uncorrected: ecc(MemoryError::Uncorrected),
            retired_pages_single: retired(RetirementCause::MultipleSingleBitEccErrors),
            retired_pages_double: retired(RetirementCause::DoubleBitEccError),
            remapped_rows: remapped_rows(self.nvml, &device),
            last_xid,
            xid_events,
            throttle: device.current_throttle_reasons().ok().map(|r| Throttle {
                hw_slowdown: r.contains(ThrottleReasons::HW_SLOWDOWN),
                hw_thermal: r.contains(ThrottleReasons::HW_THERMAL_SLOWDOWN),
                sw_thermal: r.contains(ThrottleReasons::SW_THERMAL_SLOWDOWN),
                power_brake: r.contains(ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN),
            }),
            uuid,
        })
    }
}

impl GpuSource for NvmlGpus {
    fn read(&self) -> Vec<GpuReading> {
        let count = self.nvml.device_count().unwrap_or(0);
        (0..count).filter_map(|i| self.read_device(i)).collect()
    }
}

fn register_xids(nvml: &'static Nvml, device: &Device<'static>) -> Option<EventSet<'static>> {
    let supported = device.supported_event_types().ok()?;
    if !supported.contains(EventTypes::CRITICAL_XID_ERROR) {
        return None;
    }
    // One set per device: a failed registration releases its set, and must not take the
    // other GPUs' events with it.
    let set = nvml.create_event_set().ok()?;
    match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
        Ok(set) => Some(set),
        Err(e) => {
            tracing::warn!("GPU XID events unavailable: {e}");
            None
        }
    }
}

/// Row remapping (Ampere and later). `nvml-wrapper` does not wrap this call, so it goes to
/// the loaded library directly; a driver without the symbol means "not supported".
fn remapped_rows(nvml: &Nvml, device: &Device<'_>) -> Option<RemappedRows> {
    let f = nvml.lib().nvmlDeviceGetRemappedRows.as_ref().ok()?;
    let (mut corr, mut unc, mut pending, mut failed) = (0, 0, 0, 0);
    // SAFETY: the symbol comes from the loaded NVML with the signature NVML declares; the
    // handle is valid while `device` lives; the four out-pointers are valid locals.
    let rc = unsafe {
        f(
            device.handle(),
            &mut corr,
            &mut unc,
            &mut pending,
            &mut failed,
        )
    };
    // NVML_SUCCESS is 0; anything else (NOT_SUPPORTED on older GPUs) skips the metric.
    (rc == 0).then_some(RemappedRows {
        correctable: corr.into(),
        uncorrectable: unc.into(),
        pending: pending != 0,
        failed: failed != 0,
    })
}

/// One GPU as the node's labels describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuModel {
    /// NVML's device name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Its architecture, lowercase ([`arch_name`]).
    pub arch: Option<&'static str>,
}

/// Every GPU NVML lists, in its order; none without NVML.
pub fn models() -> Vec<GpuModel> {
    nvml_source();
    let Some(nvml) = NVML.get().and_then(Option::as_ref) else {
        return vec![];
    };
    let count = nvml.device_count().unwrap_or(0);
    (0..count)
        .filter_map(|i| {
            let d = nvml.device_by_index(i).ok()?;
            let cc = d.cuda_compute_capability().ok().map(|c| (c.major, c.minor));
            Some(GpuModel {
                name: d.name().ok()?,
                arch: arch_name(d.architecture().ok(), cc),
            })
        })
        .collect()
}

/// The architecture's name as Kubernetes' GPU feature discovery writes it: NVML's when it
/// knows it, else told by the compute capability (a driver older than the GPU answers
/// `Unknown` or nothing).
pub fn arch_name(arch: Option<DeviceArchitecture>, cc: Option<(i32, i32)>) -> Option<&'static str> {
    use DeviceArchitecture as A;
    Some(match arch {
        Some(A::Kepler) => "kepler",
        Some(A::Maxwell) => "maxwell",
        Some(A::Pascal) => "pascal",
        Some(A::Volta) => "volta",
        Some(A::Turing) => "turing",
        Some(A::Ampere) => "ampere",
        Some(A::Ada) => "ada",
        Some(A::Hopper) => "hopper",
        Some(A::Blackwell) => "blackwell",
        Some(A::Unknown) | None => return arch_of_capability(cc?),
    })
}

fn arch_of_capability((major, minor): (i32, i32)) -> Option<&'static str> {
    Some(match (major, minor) {
        (3, _) => "kepler",
        (5, _) => "maxwell",
        (6, _) => "pascal",
        (7, m) if m < 5 => "volta",
        (7, _) => "turing",
        (8, 9) => "ada",
        (8, _) => "ampere",
        (9, _) => "hopper",
        (10..=12, _) => "blackwell",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // No GPU can run here: these are the mappings from what NVML answers; the lead's
    // `scripts/gpu-labels-check.sh` shows the whole path on a GPU machine.
    #[test]
    fn architectures_are_named_as_gpu_feature_discovery_does() {
        assert_eq!(
            arch_name(Some(DeviceArchitecture::Hopper), None),
            Some("hopper")
        );
        assert_eq!(
            arch_name(Some(DeviceArchitecture::Ada), Some((8, 9))),
            Some("ada")
        );
        // A driver that does not know the GPU: the compute capability tells.
        for (cc, want) in [
            ((3, 7), "kepler"),
            ((5, 2), "maxwell"),
            ((6, 0), "pascal"),
            ((7, 0), "volta"),
            ((7, 2), "volta"),
            ((7, 5), "turing"),
            ((8, 0), "ampere"),
            ((8, 6), "ampere"),
            ((8, 9), "ada"),
            ((9, 0), "hopper"),
            ((10, 0), "blackwell"),
            ((12, 0), "blackwell"),
        ] {
            assert_eq!(
                arch_name(Some(DeviceArchitecture::Unknown), Some(cc)),
                Some(want),
                "{cc:?}"
            );
            assert_eq!(arch_name(None, Some(cc)), Some(want), "{cc:?}");
        }
        assert_eq!(
            arch_name(Some(DeviceArchitecture::Unknown), Some((42, 0))),
            None
        );
        assert_eq!(arch_name(None, None), None);
    }
}
