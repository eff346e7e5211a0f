package vfs

import (
	"encoding/hex"
	"os"
	"strings"
	"sync"
)

// BootIDer is implemented by file systems that can name the current boot
// of the machine: an identity that changes at every restart, and so after
// every power cut. The WAL records it, so that recovery knows whether the
// page cache could have lost unsynced writes since a log was written.
type BootIDer interface {
	BootID() [16]byte
}

// BootID returns fsys's boot ID, or the zero ID ("unknown": recovery then
// assumes a power cut may have happened) if fsys does not know one.
func BootID(fsys FS) [16]byte {
	if b, ok := fsys.(BootIDer); ok {
		return b.BootID()
	}
	return [16]byte{}
}

// BootID reads Linux's /proc/sys/kernel/random/boot_id (zero elsewhere).
func (osFS) BootID() [16]byte {
	bootOnce.Do(func() {
		b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
		if err != nil {
			return
		}
		h, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(string(b)), "-", ""))
		if err == nil && len(h) == 16 {
			copy(bootID[:], h)
		}
	})
	return bootID
}

var (
	bootOnce sync.Once
	bootID   [16]byte
)
