package redis

import "github.com/sluicehq/sluice/rate"

// PinNow makes the store's script take "now" from c instead of Redis's
// TIME, and turns off expiry, for tests that drive time.
func PinNow(o *Options, c rate.Clock) { o.pinned = c }

// DenyCacheLen returns the number of entries in s's deny cache.
func DenyCacheLen(s *Store) int {
	if s.deny == nil {
		return 0
	}
	return s.deny.len()
}

// Slot returns key's Redis Cluster slot.
func Slot(key string) uint16 { return slot(key) }

// AfterCheck makes s call f between the check and the commit of every
// request whose keys span several cluster slots.
func AfterCheck(s *Store, f func()) { s.afterCheck = f }
