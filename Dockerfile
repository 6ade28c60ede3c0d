# Multi-stage: build with the Rust toolchain, run from a slim image on LocalStack's port.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --bin orderly

FROM debian:bookworm-slim
COPY --from=build /src/target/release/orderly /usr/local/bin/orderly
ENV ORDERLY_BIND=0.0.0.0:4566
EXPOSE 4566
ENTRYPOINT ["/usr/local/bin/orderly"]
