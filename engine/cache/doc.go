// Package cache is the store of cached step results (docs/spec.md §5.15):
// under <state-dir>/cache, one entry file per result and one blob per file
// content.
//
//	cache/entries/<task_name>/<step>/<key>.json   one successful result
//	cache/blobs/<sha256 hex>                        a saved file, by content
//
// An entry names the task that made it, the step's output, the digests of
// its inputs: files and, for each outputs: file, the blob that holds it.
// Every file is written whole or not at all (eventlog.WriteFileAtomic:
// temporary file, fsync, rename, folder fsync), and an entry only after
// the blobs it names: a crash leaves no entry, or one whose files are all
// there. What can go wrong later — a blob removed or damaged, an entry
// unreadable — makes the step run, never a wrong result: Restore checks a
// blob's digest before its file replaces anything.
//
// The store is not signed: whoever can write it can change a blob and its
// digest together. What an edited entry can reach is bounded instead:
// Save and Restore keep to the files of the step's folder (no "..", no
// absolute path, no symbolic link as the file or a folder on its way),
// Restore applies permission bits only, and the engine restores only the
// outputs: its step declares. An entry holds no secret in clear: a hash of
// the cache.key, paths masked as the log masks them.
package cache
