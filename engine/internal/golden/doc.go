// Package golden compares test output with golden files under testdata/:
// JSON output normalised (times, pids, digests, temporary folders), and
// plain bytes. APOLLO_UPDATE_GOLDEN=1 rewrites the files instead.
package golden
