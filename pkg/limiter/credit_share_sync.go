package limiter

// A key's static share in its syncs: the share hits and releases a sync
// carries, and what a failed round puts back.

// takeShare moves the share hits not yet pushed, and a release asked
// for, into it. The release takes effect here: from now on the share of
// this epoch is not used. sharer says whether this replica holds a share
// of the epoch of snow; a replica that does not has nothing to release.
// upTo is the last epoch a release asked for gives up: the epoch of snow,
// or for a sliding window the next one if this replica holds a share of
// it (share_sliding.go); a replica that holds none of the epoch of snow
// gives the next one's up ahead (SyncItem.ReleaseAhead).
func (sh *shareState) takeShare(it *SyncItem, snow int64, w Window, sharer bool, upTo int64) {
	if sh == nil {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sharer {
		// Only a sharer of the epoch has a record for the floor to
		// raise: the store counts every record as one of its sharers.
		it.ShareFloor = sh.reported(w)
	}
	it.ShareHits, sh.pending = sh.pending, nil
	sh.pendingN.Store(0)
	// A release asked for is sent by a sharer of the epoch, and sent again
	// (a round that failed) by the replica that made it; a share of an
	// epoch this replica no longer holds is released unasked.
	ep := snow / int64(w.Period)
	switch {
	case sh.unset(flagRelease) && (sharer || sh.released >= ep || upTo > ep):
		sh.released = max(sh.released, upTo)
		sh.none.Store(0)
	case !sharer && (sh.stray(ep) || sh.lentIn(ep)):
		sh.released = max(sh.released, ep)
		sh.none.Store(0)
	case sh.released >= ep:
		// Said again with every sync of the epoch: a store that lost its
		// records would count the share as held by this replica, which
		// will not spend it, for the rest of the epoch.
	default:
		if sharer {
			sh.unset(flagShrink)
			sh.shrinkField(it, ep)
		}
		return
	}
	it.Release = max(snow, sh.released*int64(w.Period)) // in the last epoch released
	it.ReleaseAhead = !sharer && sh.released > ep
}

// stray reports share hits in epoch ep, of which this replica holds no
// share, not yet released: it spent from a share of ep that it no longer
// holds, as a registry lost with the store's counts no longer counts
// it. The store keeps counting its record as one of the epoch's sharers,
// the rest of it as held; the replica releases it unasked, as it will not
// spend it. sh.mu must be held.
func (sh *shareState) stray(ep int64) bool {
	return sh.released < ep && sh.state.Epoch == ep && sh.state.Cur > 0
}

// reported is the share hits the store was told of: the share's state
// less the hits still pending (SyncItem.ShareFloor). sh.mu must be held.
func (sh *shareState) reported(w Window) WindowState {
	f := sh.state
	for _, h := range sh.pending {
		switch h.At / int64(w.Period) {
		case f.Epoch:
			f.Cur = satSub(f.Cur, uint64(max(h.N, 0)))
		case f.Epoch - 1:
			f.Prev = satSub(f.Prev, uint64(max(h.N, 0)))
		}
	}
	return f
}

// untake puts back what a failed round took.
func (sh *shareState) untake(it SyncItem) {
	if sh == nil || len(it.ShareHits) == 0 {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, h := range it.ShareHits {
		sh.pendingN.Add(h.N)
	}
	sh.pending = append(it.ShareHits, sh.pending...)
	// A release stays made locally (released); every sync of the epoch
	// says it again (takeShare), and one after the epoch has no need to.
}
