package kubewasm

// The canonical ABI's memory side for bindings.go: the allocator the host calls, what is kept
// alive while the host reads it, and loads and stores at linear-memory addresses.
//
// Go's garbage collector does not move objects, so an address stays valid while the object is
// reachable. Three rules keep it reachable long enough:
//   - memory the host allocates (cabi_realloc) is held in `allocs` until its contents are
//     lifted; strings lifted from it point into it, and so keep it alive after that;
//   - memory handed to the host (strings, lists, parameters in memory) is held in `kept` until
//     the import returns, or for an export's result until the next export lowers its own
//     (no post-return: it runs where the instance may not call the host, see below);
//   - return areas are package variables, never on a goroutine stack (stacks move).

import (
	"math"
	"runtime"
	"runtime/debug"
	"unsafe"
)

// The garbage collector runs only while the plugin's own code runs. The host calls into the
// instance at two more moments, `cabi_realloc` (to hand over strings and lists) and between
// calls, and the component model forbids the instance to call the host then ("cannot leave
// component instance"). A collection starting or assisting in an allocation there reads the
// clock, a WASI call, and traps the instance. So collection is off outside the plugin's code:
// an export turns it on around the plugin's method, an import off around the host's call.

// gcPercent is GOGC while the plugin's code runs.
var gcPercent = 100

// gcOn is true while collection is on.
var gcOn = true

func init() {
	hostWindow()
	// Heap profiling is of no use in a plugin, and it is one more thing allocation does.
	runtime.MemProfileRate = 0
}

// guestWindow turns collection on for the plugin's code.
func guestWindow() {
	if !gcOn {
		debug.SetGCPercent(gcPercent)
		gcOn = true
	}
}

// hostWindow turns collection off before the host may call in; true if it was on.
func hostWindow() bool {
	if !gcOn {
		return false
	}
	gcPercent = debug.SetGCPercent(-1)
	gcOn = false
	return true
}

// arenaSize is the room the WASI adapter gets for its state and stack.
const arenaSize = 256 << 10

// adapterArena is memory for the WASI preview 1 adapter. The adapter allocates its state and
// stack while Go's runtime is still starting (`_initialize` writes and reads the clock through
// it), before any Go function may be called, so `kubewasm build` gives it a small allocator of
// its own over this array, found by its first 16 bytes (then its size, in hexadecimal).
var adapterArena = [arenaSize]byte{
	'k', 'u', 'b', 'e', 'w', 'a', 's', 'm', '.', 'a', 'r', 'e', 'n', 'a', '.', '1',
	// The size in eight hexadecimal digits: 0x00040000 is arenaSize.
	'0', '0', '0', '4', '0', '0', '0', '0',
}

// arenaTouched is written from the arena so that the arena stays in the module.
var arenaTouched byte

// allocs holds what the host allocated in this instance until it is lifted.
var allocs [][]uint64

// kept holds what the host may still read: string data and buffers handed to it.
var kept []unsafe.Pointer

//go:wasmexport cabi_realloc
func cabiRealloc(old, oldSize, align, newSize uint32) uint32 {
	// A read that keeps the arena in the module (the linker drops what no code reads).
	arenaTouched = adapterArena[arenaSize-1]
	if align > 8 {
		panic("cabi_realloc: alignment above 8")
	}
	if newSize == 0 {
		return align
	}
	// uint64 elements: every allocation is 8-aligned, the most the canonical ABI asks.
	buf := make([]uint64, (newSize+7)/8)
	p := unsafe.Pointer(&buf[0])
	if oldSize > 0 && old != 0 {
		copy(unsafe.Slice((*byte)(p), newSize), unsafe.Slice((*byte)(unsafe.Pointer(uintptr(old))), min(oldSize, newSize)))
	}
	allocs = append(allocs, buf)
	return uint32(uintptr(p))
}

// releaseAllocs forgets what the host allocated: its contents were lifted.
func releaseAllocs() {
	clear(allocs)
	allocs = allocs[:0]
}

// keptMark is where `kept` ends now, for keptRelease.
func keptMark() int { return len(kept) }

// keptRelease lets go of what was kept after `mark`.
func keptRelease(mark int) {
	clear(kept[mark:])
	kept = kept[:mark]
}

// allocKept is `size` bytes aligned to `align` (at most 8), kept until released.
func allocKept(size, align uintptr) uintptr {
	if size == 0 {
		return align
	}
	buf := make([]uint64, (size+7)/8)
	p := unsafe.Pointer(&buf[0])
	kept = append(kept, p)
	return uintptr(p)
}

func importRetAddr() uintptr { return uintptr(unsafe.Pointer(&importRet[0])) }
func exportRetAddr() uintptr { return uintptr(unsafe.Pointer(&exportRet[0])) }

// stringArg is a string's address and length; the caller keeps the string alive.
func stringArg(s string) (uint32, uint32) {
	return uint32(uintptr(unsafe.Pointer(unsafe.StringData(s)))), uint32(len(s))
}

// liftString is the string the host wrote at `ptr`, without a copy.
func liftString(ptr, n uint32) string {
	if n == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Pointer(uintptr(ptr))), n)
}

func loadString(p uintptr) string { return liftString(load32(p), load32(p+4)) }

func storeString(p uintptr, s string) {
	ptr, n := stringArg(s)
	kept = append(kept, unsafe.Pointer(unsafe.StringData(s)))
	store32(p, ptr)
	store32(p+4, n)
}

func b2u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func load8(p uintptr) uint8     { return *(*uint8)(unsafe.Pointer(p)) }
func load16(p uintptr) uint16   { return *(*uint16)(unsafe.Pointer(p)) }
func load32(p uintptr) uint32   { return *(*uint32)(unsafe.Pointer(p)) }
func load64(p uintptr) uint64   { return *(*uint64)(unsafe.Pointer(p)) }
func loadF32(p uintptr) float32 { return math.Float32frombits(load32(p)) }
func loadF64(p uintptr) float64 { return math.Float64frombits(load64(p)) }

func store8(p uintptr, v uint8)     { *(*uint8)(unsafe.Pointer(p)) = v }
func store16(p uintptr, v uint16)   { *(*uint16)(unsafe.Pointer(p)) = v }
func store32(p uintptr, v uint32)   { *(*uint32)(unsafe.Pointer(p)) = v }
func store64(p uintptr, v uint64)   { *(*uint64)(unsafe.Pointer(p)) = v }
func storeF32(p uintptr, v float32) { store32(p, math.Float32bits(v)) }
func storeF64(p uintptr, v float64) { store64(p, math.Float64bits(v)) }

// lent is a handle lent to the current export call and how to give it back.
type lent struct {
	handle uint32
	drop   func(uint32)
}

// borrowed holds the handles lent to the current export call.
var borrowed []lent

// returnBorrowed gives back the handles lent to the export call that is returning.
func returnBorrowed() {
	for _, b := range borrowed {
		b.drop(b.handle)
	}
	clear(borrowed)
	borrowed = borrowed[:0]
}
