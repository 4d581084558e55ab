//! Work spread over the cores for large loads (parsing files, resolving names, building
//! profiles): contiguous chunks, one per core, joined in order, so that results come out
//! exactly as one thread would produce them.

/// `work` over contiguous chunks of `items` (at least `min_chunk` items each), one chunk per
/// core; the chunks' results in order. A chunk whose thread cannot be started is done on
/// the calling thread.
pub fn chunked<T: Sync, C: Send>(
    items: &[T],
    min_chunk: usize,
    work: impl Fn(&[T]) -> C + Sync,
) -> Vec<C> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = items.len().div_ceil(workers).max(min_chunk).max(1);
    if items.len() <= chunk {
        return vec![work(items)];
    }
    let work = &work;
    std::thread::scope(|scope| {
        let spawn = |part| std::thread::Builder::new().spawn_scoped(scope, move || work(part));
        let started: Vec<_> =
            items.chunks(chunk).map(|part| spawn(part).map_err(|_| part)).collect();
        started
            .into_iter()
            .map(|s| match s {
                Ok(h) => h.join().expect("a configuration thread panicked"),
                Err(part) => work(part),
            })
            .collect()
    })
}
