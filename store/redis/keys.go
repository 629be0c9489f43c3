package redis

import "strings"

// redisKey returns the Redis key holding the state of request key k.
//
// A key that carries a hash tag (a non-empty {…}, as Redis Cluster reads
// it) keeps it: its caller chose which keys share a slot. Any other key is
// wrapped whole in braces, so its slot depends on the key alone and keys
// spread over the cluster. The prefix is outside the tag and does not
// affect the slot, unless it holds a tag of its own (then it is the
// first, which Redis Cluster hashes, and every key shares its slot).
func redisKey(prefix, k string) string {
	if hasTag(k) {
		return prefix + k
	}
	return prefix + "{" + k + "}"
}

// hashTag returns the part of key that Redis Cluster hashes: the content of
// the first {…} if it is not empty, else the whole key.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// hasTag reports whether key has a hash tag: then the part hashed is
// shorter than the key.
func hasTag(key string) bool { return len(hashTag(key)) < len(key) }

// slot returns key's Redis Cluster slot: CRC16 (XMODEM) of its hash tag,
// modulo 16384.
func slot(key string) uint16 {
	var crc uint16
	tag := hashTag(key)
	for i := range len(tag) {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^tag[i]]
	}
	return crc & 16383
}

// crcTable holds the CRC16 (XMODEM, polynomial 0x1021) of each byte, so
// that slot takes a byte at a step rather than a bit: it runs for every
// key of every decision on a cluster.
var crcTable = func() (t [256]uint16) {
	for b := range t {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[b] = crc
	}
	return t
}()
