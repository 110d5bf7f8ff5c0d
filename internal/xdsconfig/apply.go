package xdsconfig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// Update is the outcome of one response. Its Result reads as a policy
// Watcher's does: Snapshot is current after the response, Changed is set
// when a new snapshot was published, Problems are those of the set the
// response carried (applied or not), and Err, set when the response was
// rejected, is a *RejectedError or the decoding error.
type Update struct {
	policy.Result
	// VersionInfo and Nonce are the response's.
	VersionInfo string
	Nonce       string
	// Applied is set when the response was ACKed (Err is nil).
	Applied bool
}

// Status describes the source for operators.
type Status struct {
	Type      string `json:"type"` // SourceType
	ServerURL string `json:"server_url"`
	NodeID    string `json:"node_id"`
	TLS       bool   `json:"tls"`
	// Connected is set while a stream is open on which the server answered.
	Connected bool `json:"connected"`
	// VersionInfo, Resources and AppliedAt describe the current set; they
	// are empty until the first one.
	VersionInfo string    `json:"version_info"`
	Resources   []string  `json:"resources"`
	AppliedAt   time.Time `json:"applied_at,omitzero"`
	// Rejected is the last response NACKed since the current set was
	// applied.
	Rejected *Rejection `json:"rejected,omitempty"`
	// Reconnects counts the streams that ended; LastError is why the last
	// one did.
	Reconnects int    `json:"reconnects"`
	LastError  string `json:"last_error,omitempty"`
}

// Rejection is a NACKed response.
type Rejection struct {
	VersionInfo string    `json:"version_info"`
	Error       string    `json:"error"`
	At          time.Time `json:"at"`
}

// RejectedError is why a set was rejected: its Error problems.
type RejectedError struct {
	Problems []policy.Problem
}

// maxDetail bounds the problems listed in a NACK's error_detail.
const maxDetail = 10

func (e *RejectedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d error(s) in the rate limit configs", len(e.Problems))
	for i, p := range e.Problems {
		if i == maxDetail {
			fmt.Fprintf(&b, "; and %d more", len(e.Problems)-maxDetail)
			break
		}
		b.WriteString("; ")
		b.WriteString(p.String())
	}
	return b.String()
}

// resourceWrapperURL is the type of a resource wrapped with a TTL.
const resourceWrapperURL = "type.googleapis.com/envoy.service.discovery.v3.Resource"

// build compiles the set a response carries with the load options. The
// snapshot is nil only when a resource could not be decoded; err is set
// when the set must be rejected.
func build(resp *discovery.DiscoveryResponse, load policy.LoadOptions) (*policy.Snapshot, []string, error) {
	if resp.GetTypeUrl() != TypeURL {
		return nil, nil, fmt.Errorf("unexpected type_url %q, want %q", resp.GetTypeUrl(), TypeURL)
	}
	files := make([]policy.File, 0, len(resp.GetResources()))
	names := make([]string, 0, len(resp.GetResources()))
	seen := map[string]bool{}
	for i, res := range resp.GetResources() {
		cfg, err := decode(res)
		if err != nil {
			return nil, nil, fmt.Errorf("resources[%d]: %w", i, err)
		}
		if cfg == nil {
			continue // a TTL heartbeat without content
		}
		data, err := toYAML(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("resources[%d] %q: %w", i, cfg.GetName(), err)
		}
		name := fileName(cfg, i, seen)
		files = append(files, policy.File{Name: name, Data: data})
		names = append(names, name)
	}
	sort.Strings(names)
	snap := policy.CompileWith(load, files...)
	var errs []policy.Problem
	for _, p := range snap.Problems() {
		if p.Severity == policy.Error {
			errs = append(errs, p)
		}
	}
	if len(errs) > 0 {
		return snap, nil, &RejectedError{Problems: errs}
	}
	return snap, names, nil
}

// decode unpacks one resource, unwrapping a TTL wrapper; nil, nil for a
// wrapper without a resource.
func decode(res *anypb.Any) (*rlsconf.RateLimitConfig, error) {
	if res.GetTypeUrl() == resourceWrapperURL {
		w := &discovery.Resource{}
		if err := res.UnmarshalTo(w); err != nil {
			return nil, err
		}
		if w.GetResource() == nil {
			return nil, nil
		}
		res = w.GetResource()
	}
	cfg := &rlsconf.RateLimitConfig{}
	if err := res.UnmarshalTo(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// fileName names a resource's document: its name, else its domain, made
// unique with the resource's index.
func fileName(cfg *rlsconf.RateLimitConfig, i int, seen map[string]bool) string {
	base := cfg.GetName()
	if base == "" {
		base = cfg.GetDomain()
	}
	name := base
	for n := i; name == "" || seen[name]; n++ {
		name = base + "#" + strconv.Itoa(n)
	}
	seen[name] = true
	return name
}

// handle processes one response: the request to send back (ACK or NACK)
// and what happened. repeats counts the resends, identical but for the
// nonce, of a response rejected just before (a server may resend at once
// what was NACKed): those are NACKed again without being rebuilt or
// logged, and give no Update (ok is false).
func (c *Client) handle(resp *discovery.DiscoveryResponse) (req *discovery.DiscoveryRequest, u Update, ok bool, repeats int) {
	start := time.Now()
	u = Update{VersionInfo: resp.GetVersionInfo(), Nonce: resp.GetNonce()}
	sum := digest(resp)
	if r := c.rejected; r != nil && r.digest == sum {
		r.repeats++
		return c.nack(resp, r.err), u, false, r.repeats
	}
	snap, names, err := build(resp, c.opts.Load)
	u.Duration = time.Since(start)
	u.Problems = snap.Problems()
	if err != nil {
		u.Err, u.Snapshot = err, c.cur.Load()
		c.rejected = &lastRejection{digest: sum, err: err}
		c.reject(resp, err)
		return c.nack(resp, err), u, true, 0
	}
	c.rejected = nil
	u.Applied = true
	u.Changed = c.apply(snap, names, resp.GetVersionInfo())
	u.Snapshot = c.cur.Load()
	c.logApplied(u, len(names))
	return &discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(),
		ResponseNonce: resp.GetNonce()}, u, true, 0
}

// lastRejection remembers the response rejected last, to spot resends.
type lastRejection struct {
	digest  [sha256.Size]byte
	err     error
	repeats int
}

// digest identifies a response's content: its type, version and set of
// resources (in any order), not its nonce.
func digest(resp *discovery.DiscoveryResponse) [sha256.Size]byte {
	sums := make([][sha256.Size]byte, 0, len(resp.GetResources()))
	for _, r := range resp.GetResources() {
		sums = append(sums, hashFields([]byte(r.GetTypeUrl()), r.GetValue()))
	}
	sort.Slice(sums, func(i, j int) bool { return bytes.Compare(sums[i][:], sums[j][:]) < 0 })
	fields := [][]byte{[]byte(resp.GetTypeUrl()), []byte(resp.GetVersionInfo())}
	for i := range sums {
		fields = append(fields, sums[i][:])
	}
	return hashFields(fields...)
}

// hashFields hashes a sequence of byte strings, each with its length.
func hashFields(fields ...[]byte) [sha256.Size]byte {
	h := sha256.New()
	for _, f := range fields {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write(f)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// nackPace is how long to hold the NACK of the n-th resend of a rejected
// response (n ≥ 1): 50 ms, doubling, at most nackPaceMax. It turns a
// server's resend-at-once into a slow retry, and delays by at most
// nackPaceMax a fix the server has in the meantime.
func nackPace(n int) time.Duration {
	d := 50 * time.Millisecond
	for i := 1; i < n && d < nackPaceMax; i++ {
		d *= 2
	}
	return min(d, nackPaceMax)
}

const nackPaceMax = time.Second

// nack refuses resp, holding on to the version applied last.
func (c *Client) nack(resp *discovery.DiscoveryResponse, err error) *discovery.DiscoveryRequest {
	typeURL, version := resp.GetTypeUrl(), c.applied
	if typeURL != TypeURL {
		version = ""
	}
	return &discovery.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: version, ResponseNonce: resp.GetNonce(),
		ErrorDetail: &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}}
}

// apply publishes snap unless it equals the current one, and reports
// whether it did.
func (c *Client) apply(snap *policy.Snapshot, names []string, version string) bool {
	changed := !c.HasConfig() || snap.Version() != c.cur.Load().Version()
	if changed {
		c.cur.Store(snap)
	}
	c.applied = version
	c.mu.Lock()
	c.status.VersionInfo, c.status.Resources, c.status.AppliedAt = version, names, time.Now()
	c.status.Rejected = nil
	c.mu.Unlock()
	c.once.Do(func() { close(c.ready) })
	return changed
}

func (c *Client) reject(resp *discovery.DiscoveryResponse, err error) {
	c.mu.Lock()
	c.status.Rejected = &Rejection{VersionInfo: resp.GetVersionInfo(), Error: err.Error(), At: time.Now()}
	c.mu.Unlock()
	c.log.Error("xDS config rejected; keeping the last good set", "version", resp.GetVersionInfo(),
		"kept_version", c.applied, "error", err)
}

func (c *Client) logApplied(u Update, resources int) {
	if !u.Changed {
		c.log.Debug("xDS config unchanged", "version", u.VersionInfo)
		return
	}
	c.log.Info("xDS config applied", "version", u.VersionInfo, "snapshot", u.Snapshot.Version(),
		"resources", resources, "domains", len(u.Snapshot.Domains()), "warnings", len(u.Problems))
	for _, p := range u.Problems {
		c.log.Log(context.Background(), slog.LevelInfo, "policy problem", "problem", p.String(), "line", p.Line)
	}
}
