package redistest

import "os"

// sigStop and sigCont are nil: Windows has no signal that pauses a
// process, and a test that pauses a server fails.
var sigStop, sigCont os.Signal
