package farm

import (
	"os"
	"testing"

	"github.com/framepack-go/framepack/internal/testmode"
)

func TestMain(m *testing.M) {
	testmode.WaitingTests(8) // each test has its own NATS server and mostly waits out ack waits and delays
	os.Exit(m.Run())
}
