//! The one store wrapper of the tests and the bench: a store that behaves as
//! the one it wraps, except where its [`Hooks`] say otherwise. A wrapper (a
//! slow network, a store that counts, a planted bug) writes only what it
//! changes: every hook passes the call on unchanged by default.

use async_trait::async_trait;
use bytes::Bytes;
use idempotent_submit::clock::Offset;
use idempotent_submit::store::{
    ETag, ListPage, Object, ObjectMeta, Op, PutMode, PutResult, Store, StoreError,
};

/// One call of the store, as [`Hooks::before`] and [`Hooks::after`] see it.
pub struct Call<'a> {
    pub op: Op,
    /// The object's key (a listing's prefix).
    pub key: &'a str,
    /// What a put writes.
    pub body: Option<&'a Bytes>,
}

/// What a wrapper does to the calls of the store it wraps, [`Hooks::inner`].
/// `before` and `after` run around every call; each call's own method
/// defaults to the inner store's.
#[async_trait]
pub trait Hooks: Send + Sync + 'static {
    type Inner: Store;

    /// The store calls go on to.
    fn inner(&self) -> &Self::Inner;

    /// Before every call: an error is the call's answer, and the call never
    /// reaches the store.
    async fn before(&self, _call: &Call<'_>) -> Result<(), StoreError> {
        Ok(())
    }

    /// After every call that `before` let through; `ok`: it succeeded.
    async fn after(&self, _call: &Call<'_>, _ok: bool) {}

    fn clock_offset(&self) -> Option<Offset> {
        self.inner().clock_offset()
    }
    async fn get(&self, key: &str) -> Result<Object, StoreError> {
        self.inner().get(key).await
    }
    async fn get_if_none_match(&self, key: &str, etag: &ETag) -> Result<Object, StoreError> {
        self.inner().get_if_none_match(key, etag).await
    }
    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        self.inner().head(key).await
    }
    async fn put(&self, key: &str, body: Bytes, mode: PutMode) -> Result<PutResult, StoreError> {
        self.inner().put(key, body, mode).await
    }
    async fn delete(&self, key: &str, if_match: Option<&ETag>) -> Result<(), StoreError> {
        self.inner().delete(key, if_match).await
    }
    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        page: Option<String>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.inner().list(prefix, start_after, page, limit).await
    }
}

/// The store of a [`Hooks`]: every call through `before`, the hook's own
/// method, then `after`.
#[derive(Clone)]
pub struct Wrapped<H>(pub H);

impl<H: Hooks> Wrapped<H> {
    async fn call<T>(
        &self,
        call: Call<'_>,
        f: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.0.before(&call).await?;
        let r = f.await;
        self.0.after(&call, r.is_ok()).await;
        r
    }

    fn on(op: Op, key: &str) -> Call<'_> {
        Call {
            op,
            key,
            body: None,
        }
    }
}

#[async_trait]
impl<H: Hooks> Store for Wrapped<H> {
    fn clock_offset(&self) -> Option<Offset> {
        self.0.clock_offset()
    }
    async fn get(&self, key: &str) -> Result<Object, StoreError> {
        self.call(Self::on(Op::Get, key), self.0.get(key)).await
    }
    /// A GET, as the fault injector logs it.
    async fn get_if_none_match(&self, key: &str, etag: &ETag) -> Result<Object, StoreError> {
        self.call(Self::on(Op::Get, key), self.0.get_if_none_match(key, etag))
            .await
    }
    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        self.call(Self::on(Op::Head, key), self.0.head(key)).await
    }
    async fn put(&self, key: &str, body: Bytes, mode: PutMode) -> Result<PutResult, StoreError> {
        let op = match mode {
            PutMode::Create => Op::PutCreate,
            PutMode::Update(_) => Op::PutUpdate,
            PutMode::Overwrite => Op::Put,
        };
        let call = Call {
            op,
            key,
            body: Some(&body),
        };
        self.call(call, self.0.put(key, body.clone(), mode)).await
    }
    async fn delete(&self, key: &str, if_match: Option<&ETag>) -> Result<(), StoreError> {
        self.call(Self::on(Op::Delete, key), self.0.delete(key, if_match))
            .await
    }
    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        page: Option<String>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let f = self.0.list(prefix, start_after, page, limit);
        self.call(Self::on(Op::List, prefix), f).await
    }
}
