//! Every statement is prepared once per connection and kept (deadpool's statement cache), so
//! running it is one round trip to the database rather than two (parse, then execute).

use std::future::Future;

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Error, Row};

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// `query`, `query_one`, `query_opt` and `execute` through the connection's statement cache.
pub trait Cached: GenericClient {
    fn rows<'a>(
        &'a self,
        sql: &'a str,
        params: Params<'a>,
    ) -> impl Future<Output = Result<Vec<Row>, Error>> + Send + 'a
    where
        Self: Sized,
    {
        async move {
            let statement = self.prepare_cached(sql).await?;
            self.query(&statement, params).await
        }
    }

    fn row<'a>(
        &'a self,
        sql: &'a str,
        params: Params<'a>,
    ) -> impl Future<Output = Result<Row, Error>> + Send + 'a
    where
        Self: Sized,
    {
        async move {
            let statement = self.prepare_cached(sql).await?;
            self.query_one(&statement, params).await
        }
    }

    fn maybe_row<'a>(
        &'a self,
        sql: &'a str,
        params: Params<'a>,
    ) -> impl Future<Output = Result<Option<Row>, Error>> + Send + 'a
    where
        Self: Sized,
    {
        async move {
            let statement = self.prepare_cached(sql).await?;
            self.query_opt(&statement, params).await
        }
    }

    fn run<'a>(
        &'a self,
        sql: &'a str,
        params: Params<'a>,
    ) -> impl Future<Output = Result<u64, Error>> + Send + 'a
    where
        Self: Sized,
    {
        async move {
            let statement = self.prepare_cached(sql).await?;
            self.execute(&statement, params).await
        }
    }
}

impl<T: GenericClient> Cached for T {}
