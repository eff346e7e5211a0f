//go:build !linux

package engines

import "time"

func threadRunqueueWait() (time.Duration, bool) { return 0, false }
