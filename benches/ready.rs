fn main() { println!("placeholder: see benches/ready.rs once written"); }
