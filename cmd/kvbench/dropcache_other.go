//go:build !linux

package main

import "errors"

const dropCacheSupported = false

// dropCache is Linux-only; config.validate rejects -drop-cache elsewhere.
func dropCache(string) error {
	return errors.New("drop cache: not supported on this system")
}
