package memory

import (
	"hash/maphash"
	"math/bits"
)

// hasher hashes keys with seeds drawn for one store, so that which keys
// collide cannot be known outside it: keys come from clients, and keys
// made to collide would make a shard's probes long.
//
// Keys of up to 16 bytes, the most common (an IP address, a user id), are
// hashed inline with the short-input path of wyhash, the hash Go's own
// maps use where the CPU has no AES instructions: two multiplications of
// the key's words with the secret seeds. Longer keys go to hash/maphash,
// which uses AES where the CPU has it. Calling it costs more than hashing
// a short key this way.
type hasher struct {
	seed   maphash.Seed
	k0, k1 uint64
}

func newHasher() hasher {
	seed := maphash.MakeSeed()
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteByte(0)
	k0 := h.Sum64()
	h.WriteByte(1)
	return hasher{seed: seed, k0: k0, k1: h.Sum64()}
}

// m5 is wyhash's constant for mixing in the length.
const m5 = 0x1d8e4e27c47d124f

// hash returns key's hash. Store.decide has the same lines written out,
// for keys of 8 to 16 bytes; TestKeyLengths fails if the two disagree.
func (h *hasher) hash(key string) uint64 {
	n := len(key)
	if n < 8 || n > 16 {
		return h.other(key)
	}
	return mix(m5^uint64(n), mix(le64(key)^h.k1, le64(key[n-8:])^h.k0))
}

// other is hash for keys shorter than 8 or longer than 16 bytes.
func (h *hasher) other(key string) uint64 {
	n := len(key)
	var a, b uint64
	switch {
	case n > 16:
		return maphash.String(h.seed, key)
	case n >= 4:
		a, b = uint64(le32(key)), uint64(le32(key[n-4:]))
	case n > 0:
		a = uint64(key[0])<<16 | uint64(key[n>>1])<<8 | uint64(key[n-1])
	}
	return mix(m5^uint64(n), mix(a^h.k1, b^h.k0))
}

// mix folds the 128-bit product of a and b into 64 bits.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// le64 returns the first 8 bytes of s as a little-endian number; the
// compiler makes it one load.
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// le32 returns the first 4 bytes of s as a little-endian number.
func le32(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}
