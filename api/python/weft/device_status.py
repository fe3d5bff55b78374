"""weft_device_status_t (weft.h) read from the host: the words kernels written outside weft honour
(stop, abort), the first failure (error) and its record. The struct lives in host memory mapped
into the device at the same address, so the host reads it without synchronising with any stream.
"""
import ctypes

TIMEOUT = 1          # WEFT_DEVICE_STATUS_TIMEOUT
BAD_INPUT = 4        # WEFT_DEVICE_STATUS_BAD_INPUT
WAIT_EXTERNAL = 17   # WEFT_DEVICE_WAIT_EXTERNAL
TICKET_EXTERNAL = (1 << 64) - 1  # WEFT_DEVICE_TICKET_EXTERNAL

# Byte offsets of the fields, which kernels use as word offsets from the status address.
STOP, ABORT, ERROR, RECORD_VALID = 0, 4, 8, 12
TICKET, ITEM, PEER, WHAT, STATUS, EXPECTED, OBSERVED = 16, 24, 28, 32, 36, 40, 48


class _Record(ctypes.Structure):
    _fields_ = [("ticket", ctypes.c_uint64), ("item", ctypes.c_uint32), ("peer", ctypes.c_int32),
                ("what", ctypes.c_uint32), ("status", ctypes.c_uint32), ("expected", ctypes.c_uint64),
                ("observed", ctypes.c_uint64)]


class DeviceStatus(ctypes.Structure):
    """weft_device_status_t, field for field (56 bytes)."""
    _fields_ = [("stop", ctypes.c_uint32), ("abort", ctypes.c_uint32), ("error", ctypes.c_uint32),
                ("record_valid", ctypes.c_uint32), ("record", _Record)]


assert ctypes.sizeof(DeviceStatus) == 56
assert DeviceStatus.record.offset == TICKET and _Record.observed.offset + TICKET == OBSERVED


def at(address):
    """The live status struct at `address` (DeviceView.status_host_address); reads see the device's
    writes."""
    if not address:
        raise ValueError("weft.device_status.at: address: NULL")
    return DeviceStatus.from_address(address)


def external_failure(address):
    """None, or (status, item, peer, expected, observed) of a failure that a kernel outside weft's
    engine recorded (ticket WEFT_DEVICE_TICKET_EXTERNAL)."""
    s = at(address)
    if not s.error or not s.record_valid:
        return None
    r = s.record
    if r.ticket != TICKET_EXTERNAL or r.what != WAIT_EXTERNAL:
        return None
    return (r.status, r.item, r.peer, r.expected, r.observed)
