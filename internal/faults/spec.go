package faults

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// EnvVar names the environment variable FromEnv reads.
const EnvVar = "WEFT_FAULTS"

// DefaultDelay is the longest a reordered frame or a duplicate is held back
// when the Spec does not say (Delay zero).
const DefaultDelay = time.Millisecond

// ErrSpec is wrapped by every error Parse, FromEnv and Validate return, and
// by the Sends of a Device that Wrap was given an invalid Spec.
var ErrSpec = errors.New("faults: bad fault specification")

// Spec says which faults to inject and how often. Rates are probabilities
// in [0, 1]; the zero Spec injects nothing. Loss applies to every frame,
// the other rates to the frames not lost, each on its own: with loss=0.5
// and dup=0.2, 10% of the frames offered are sent twice.
type Spec struct {
	// Loss is the probability that a frame is dropped.
	Loss float64
	// Reorder is the probability that a frame not lost is held back for a
	// random time up to Delay, so that frames sent after it overtake it.
	Reorder float64
	// Dup is the probability that a frame not lost is sent twice, the
	// second copy held back for a random time up to Delay (whether or
	// not the frame is reordered).
	Dup float64
	// Corrupt is the probability that one bit of a frame not lost is
	// flipped after it was sealed, so the receiver drops it as
	// hal.DropCRC.
	Corrupt float64
	// Delay is the longest hold for a reordered frame or a duplicate;
	// zero means DefaultDelay.
	Delay time.Duration
	// Seed selects the random streams; the same seed gives the same
	// verdicts.
	Seed uint64
}

// Enabled reports whether the Spec injects any fault at all.
func (s Spec) Enabled() bool {
	return s.Loss > 0 || s.Reorder > 0 || s.Dup > 0 || s.Corrupt > 0
}

// MaxDelay is the longest hold for a reordered frame or a duplicate, with
// the default applied.
func (s Spec) MaxDelay() time.Duration {
	if s.Delay <= 0 {
		return DefaultDelay
	}
	return s.Delay
}

// String is the WEFT_FAULTS form of s, which Parse reads back to s.
func (s Spec) String() string {
	var b strings.Builder
	for _, r := range s.rates() {
		fmt.Fprintf(&b, "%s=%s,", r.name, strconv.FormatFloat(*r.p, 'g', -1, 64))
	}
	if s.Delay != 0 {
		fmt.Fprintf(&b, "delay=%v,", s.Delay)
	}
	fmt.Fprintf(&b, "seed=%d", s.Seed)
	return b.String()
}

type rateField struct {
	name string
	p    *float64
}

// rates lists the rate fields by their WEFT_FAULTS names, so Parse, String
// and Validate agree on them.
func (s *Spec) rates() [4]rateField {
	return [4]rateField{{"loss", &s.Loss}, {"reorder", &s.Reorder}, {"dup", &s.Dup}, {"corrupt", &s.Corrupt}}
}

// Validate reports the first field of s out of range.
func (s Spec) Validate() error {
	for _, r := range s.rates() {
		if !(*r.p >= 0 && *r.p <= 1) { // also catches NaN
			return fmt.Errorf("%w: %s=%v: rate must be between 0 and 1", ErrSpec, r.name, *r.p)
		}
	}
	if s.Delay < 0 {
		return fmt.Errorf("%w: delay=%v: must not be negative", ErrSpec, s.Delay)
	}
	return nil
}

// Parse reads the WEFT_FAULTS syntax: comma-separated name=value items,
// for example "loss=0.2,reorder=0.1,dup=0.05,corrupt=0.01,delay=2ms,seed=7".
// Names are loss, reorder, dup, corrupt (rates in [0, 1]), delay (a Go
// duration, > 0) and seed (an unsigned integer). Omitted fields are zero; an
// empty string is the zero Spec. Each name may appear once.
func Parse(s string) (Spec, error) {
	var spec Spec
	seen := make(map[string]bool)
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, val, ok := strings.Cut(item, "=")
		name, val = strings.TrimSpace(name), strings.TrimSpace(val)
		if !ok {
			return Spec{}, fmt.Errorf("%w: %q: want name=value", ErrSpec, item)
		}
		if seen[name] {
			return Spec{}, fmt.Errorf("%w: %s given twice", ErrSpec, name)
		}
		seen[name] = true
		if err := spec.set(name, val); err != nil {
			return Spec{}, err
		}
	}
	return spec, spec.Validate()
}

// set assigns one parsed item.
func (s *Spec) set(name, val string) error {
	switch name {
	case "delay":
		d, err := time.ParseDuration(val)
		if err != nil || d <= 0 {
			return fmt.Errorf("%w: delay=%q: want a positive duration such as 2ms", ErrSpec, val)
		}
		s.Delay = d
		return nil
	case "seed":
		n, err := strconv.ParseUint(val, 0, 64)
		if err != nil {
			return fmt.Errorf("%w: seed=%q: want an unsigned integer", ErrSpec, val)
		}
		s.Seed = n
		return nil
	}
	for _, r := range s.rates() {
		if r.name != name {
			continue
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil || math.IsNaN(f) || f < 0 || f > 1 {
			return fmt.Errorf("%w: %s=%q: want a rate between 0 and 1", ErrSpec, name, val)
		}
		*r.p = f
		return nil
	}
	return fmt.Errorf("%w: unknown field %q (want loss, reorder, dup, corrupt, delay or seed)", ErrSpec, name)
}

// FromEnv parses WEFT_FAULTS. ok is false when the variable is unset or
// empty. Devices that honour it (inproc, udp) wrap themselves with Wrap when
// ok, and so declare themselves unreliable even if every rate is zero: that
// is how a user runs LAPI's reliability machinery without losses.
func FromEnv() (spec Spec, ok bool, err error) {
	v := os.Getenv(EnvVar)
	if strings.TrimSpace(v) == "" {
		return Spec{}, false, nil
	}
	spec, err = Parse(v)
	if err != nil {
		return Spec{}, false, fmt.Errorf("%s=%q: %w", EnvVar, v, err)
	}
	return spec, true, nil
}
